import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { quoteIdentifier } from '../shared/identifiers.js';
import { OutboxError } from '../shared/errors.js';
import { openTransactionsSql, outboxLockerTransactionsSql } from './sql/lockHolders.js';

// A partition detached for its drop can hold a row a writer committed late (it took its
// id before the pass looked). Dropping it would lose that row, so it is attached again,
// and the relays must then scan below their floors (floor.ts) and low-water mark
// (lowWater.ts), which passed its ids while it was detached: the claim floors'
// generation is bumped, and a claim or walk under another generation than its floor's
// starts from 0.
//
// Why the generation is bumped twice. The ATTACH takes only SHARE UPDATE EXCLUSIVE on
// the outbox, so statements run through it, and a statement can be planned before the
// ATTACH commits and read the generation after it: its plan lacks the partition, its
// snapshot has the new generation, so it walks from 0 past the late row and a floor or
// mark computed from it holds under the new generation: the row was never published.
// Two such statements: the low-water walk (a simple query, planned, then given a later
// snapshot), and a claim prepared in a transaction that held the outbox across the ATTACH,
// which keeps its plan (shown by test/partitionsLeftover.integration.test.ts). A CI run
// lost a late row with both floors at the settled id under the new generation and no row
// claimed, which only the walk's mark sets; that window was not reproduced here. Postgres plans a statement
// against the partitions attached when its transaction first locked the outbox or
// later. So the first bump, in the ATTACH's own transaction, covers every floor found
// before it (and is what stays if this pass dies before the second); after it, the pass
// waits for every transaction that held a lock on the outbox when the ATTACH had
// committed, and bumps again: a statement that reads that second bump belongs to a
// transaction that locked the outbox after the ATTACH, and its plan has the partition.

type Queryable = pg.ClientBase | pg.Pool;

/** How often the wait for the transactions that held the outbox looks again. */
const POLL_MS = 20;

/** Whether `table` (quoted) holds an unsent row. */
export async function hasUnsent(db: Queryable, table: string): Promise<boolean> {
  const { rows } = await db.query<{ unsent: boolean }>(`SELECT EXISTS (SELECT 1 FROM ${table} WHERE sent_at IS NULL) AS unsent`);
  return rows[0]!.unsent;
}

/**
 * After a detach: drop the partition (`dropped`), or attach it again when a late commit
 * put an unsent row in it (`late commit`; see above). `maxWaitMs` bounds the wait for the
 * transactions that held the outbox through the ATTACH; the second bump comes after it
 * in any case.
 */
export async function dropOrReattach(
  db: Queryable,
  quoted: string,
  p: { name: string; lower: number | null; upper: number },
  maxWaitMs: number,
): Promise<'dropped' | 'late commit'> {
  const name = `${quoted}.${quoteIdentifier(p.name)}`;
  if (!(await hasUnsent(db, name))) {
    await db.query(`DROP TABLE ${name}`);
    return 'dropped';
  }
  // The detach left a CHECK constraint equal to the bound, so this attach reads nothing.
  const from = p.lower === null ? 'MINVALUE' : String(p.lower);
  const client = db instanceof pg.Pool ? await db.connect() : db;
  try {
    await client.query('BEGIN');
    await client.query(`ALTER TABLE ${quoted}.outbox ATTACH PARTITION ${name} FOR VALUES FROM (${from}) TO (${p.upper})`);
    await client.query(`UPDATE ${quoted}.outbox_claim_floors SET generation = generation + 1`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw new OutboxError(
      `partition ${p.name} holds unsent rows committed during its detach and could not be attached again: ${(error as Error).message}; attach it by hand (ALTER TABLE ${quoted}.outbox ATTACH PARTITION ${name} FOR VALUES FROM (${from}) TO (${p.upper})), then run UPDATE ${quoted}.outbox_claim_floors SET generation = generation + 1`,
      { retriable: true, context: { partition: p.name }, cause: error },
    );
  } finally {
    if (db instanceof pg.Pool) (client as pg.PoolClient).release();
  }
  await waitForOutboxTransactions(db, quoted, maxWaitMs);
  await db.query(`UPDATE ${quoted}.outbox_claim_floors SET generation = generation + 1`);
  return 'late commit';
}

/** Wait until every transaction that holds a lock on the outbox now has ended, or `maxWaitMs` passed. */
async function waitForOutboxTransactions(db: Queryable, quoted: string, maxWaitMs: number): Promise<void> {
  const { rows } = await db.query<{ virtualtransaction: string }>(outboxLockerTransactionsSql(quoted));
  const ids = rows.map((r) => r.virtualtransaction);
  const deadline = performance.now() + maxWaitMs;
  while (ids.length > 0 && performance.now() < deadline) {
    if ((await db.query<{ open: number }>(openTransactionsSql, [ids])).rows[0]!.open === 0) return;
    await sleep(Math.min(POLL_MS, Math.max(1, deadline - performance.now())));
  }
}
