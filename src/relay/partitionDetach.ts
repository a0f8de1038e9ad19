import { randomBytes } from 'node:crypto';
import type pg from 'pg';

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
/** Starts every detach statement, so the canceller finds its backend (also behind a transaction pooler). */
const DETACH_MARKER = '/* outbox-relay detach ';

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

/** What a detach that gave up waited for: the oldest other transaction holding a lock on the outbox. */
export interface DetachBlocker {
  pid: number;
  applicationName: string | null;
  state: string | null;
  transactionAgeSeconds: number | null;
}

/** The oldest transaction holding any lock on the outbox (a reader's too), other than a detach. No query text. */
export async function findDetachBlocker(db: Queryable, quotedSchema: string): Promise<DetachBlocker | undefined> {
  const { rows } = await db.query<{ pid: number; application_name: string | null; state: string | null; age: number | null }>(
    `SELECT a.pid, a.application_name, a.state, extract(epoch FROM now() - a.xact_start)::float8 AS age
       FROM pg_catalog.pg_locks AS l
       JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
      WHERE l.locktype = 'relation' AND l.relation = '${quotedSchema}.outbox'::regclass
        AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
        AND a.pid <> pg_catalog.pg_backend_pid()
        AND NOT starts_with(coalesce(a.query, ''), '${DETACH_MARKER}')
      ORDER BY a.xact_start NULLS LAST
      LIMIT 1`,
  );
  const b = rows[0];
  return b ? { pid: b.pid, applicationName: b.application_name, state: b.state, transactionAgeSeconds: b.age } : undefined;
}
