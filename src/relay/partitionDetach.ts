import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { DETACH_MARKER } from './sql/lockHolders.js';

// A detach of an outbox partition that cannot finish must not hold partition maintenance
// up. DETACH ... CONCURRENTLY waits for every transaction that uses the outbox to end,
// and meanwhile holds a session lock on the outbox that the ATTACH of a new partition
// waits for: behind a report that held a snapshot on the outbox for minutes, no partition
// was created and the writers' headroom ran down (issue 36). So a detach gives up after a
// bounded wait, is tried again at a later pass, and the pass names what it waited for.

type Queryable = pg.ClientBase | pg.Pool;

/** How long a detach (or its FINALIZE) may wait before it gives up until the next pass. */
export const DETACH_MAX_WAIT_MS = 30_000;

/** SQLSTATE query_canceled. */
const QUERY_CANCELED = '57014';

/**
 * Run `statement` (a DETACH ... CONCURRENTLY or FINALIZE) on `runner`; once it has run
 * `maxWaitMs`, cancel it from `canceller`, another connection (pg_cancel_backend on the
 * backend whose statement carries this call's marker: the same role may cancel it). A
 * detach cancelled while it waits leaves its partition pending; a later pass finishes it
 * with FINALIZE. Without a canceller the statement runs unbounded.
 *
 * @returns true when the statement finished, false when it was cancelled for its wait
 */
export async function detachWithin(runner: Queryable, canceller: Queryable | undefined, statement: string, maxWaitMs: number): Promise<boolean> {
  if (!canceller) {
    await runner.query(statement);
    return true;
  }
  const marker = `${DETACH_MARKER}${randomBytes(8).toString('hex')} */`;
  let cancelling: Promise<unknown> | undefined;
  const timer = setTimeout(() => {
    cancelling = canceller
      .query(
        `SELECT pg_catalog.pg_cancel_backend(pid) FROM pg_catalog.pg_stat_activity
          WHERE starts_with(query, $1) AND state = 'active' AND pid <> pg_catalog.pg_backend_pid()`,
        [marker],
      )
      .catch(() => undefined);
  }, maxWaitMs);
  try {
    await runner.query(`${marker} ${statement}`);
    return true;
  } catch (error) {
    if (cancelling && (error as { code?: string }).code === QUERY_CANCELED) return false;
    throw error;
  } finally {
    clearTimeout(timer);
    // A cancel sent as the statement finished lands on an idle backend, which ignores it;
    // waiting for it here keeps it off the runner's next statement.
    await cancelling;
  }
}
