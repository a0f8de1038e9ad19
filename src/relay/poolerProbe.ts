import type pg from 'pg';
import { ConfigError } from '../shared/errors.js';

// Whether the relay's connections reach Postgres through a transaction-pooling proxy
// (PgBouncer, Odyssey, pgcat, RDS Proxy, Supavisor in transaction mode). There a client
// connection is not a session: each transaction may run on another server connection, so
// what a session keeps (prepared statements, SET, advisory locks, LISTEN) is gone, or
// another client's, in the next one. Nothing in the protocol says a pooler is there, so
// the probe watches for its one visible effect: two client connections of ours served by
// the same backend.

/** How the relay treats connection pooling between it and Postgres (RelayOptions.pooler). */
export type PoolerMode = 'auto' | 'none' | 'transaction';

/** What {@link probePooler} found. */
export interface PoolerProbeResult {
  /** Two of our client connections ran on one backend: transaction (or statement) pooling. */
  transactionPooling: boolean;
  /** What showed it, for the log line. */
  evidence: string;
}

/** How many times the probe alternates its two connections before it says "no pooler". */
const ROUNDS = 3;

/**
 * Probe `pool` (at least two free connections) for a transaction-pooling proxy: client B
 * runs a statement and goes idle, then client A runs one. A pooler in transaction mode
 * hands A the server connection B just gave back (PgBouncer's default is the most recently
 * used one), so both report the same backend pid; without one, or in session mode, two
 * open client connections never share a backend. Repeated a few times in both orders, for
 * poolers that pick server connections round robin. A proxy that never reuses the
 * connection just released can hide from it: `pooler: 'transaction'` then says so, and a
 * prepared statement that vanishes at run time switches the relay over (relay.ts).
 *
 * @throws ConfigError when the proxy refuses transactions (statement pooling): the relay
 *   cannot work there at all
 */
export async function probePooler(pool: pg.Pool): Promise<PoolerProbeResult> {
  const a = await pool.connect();
  let b: pg.PoolClient | undefined;
  let failed: Error | undefined;
  try {
    b = await pool.connect();
    await refuseStatementPooling(a);
    for (let round = 0; round < ROUNDS; round++) {
      const [first, second] = round % 2 === 0 ? [b, a] : [a, b];
      const firstPid = await backendPid(first);
      const secondPid = await backendPid(second);
      if (firstPid === secondPid) {
        return { transactionPooling: true, evidence: `two client connections were served by the same Postgres backend (pid ${firstPid})` };
      }
    }
    return { transactionPooling: false, evidence: `${ROUNDS * 2} statements on two client connections ran on two backends` };
  } catch (error) {
    failed = error as Error;
    throw error;
  } finally {
    // Returned to the pool: on a direct connection they are ordinary sessions, and the
    // probe left nothing on them. After a failure they are discarded.
    a.release(failed);
    b?.release(failed);
  }
}

async function backendPid(client: pg.ClientBase): Promise<number> {
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return rows[0]!.pid;
}

/**
 * PgBouncer in statement mode refuses any transaction block ("transaction blocks not
 * allowed in statement pooling mode"); a batch is one transaction from claim to mark, so
 * the relay cannot run there.
 */
async function refuseStatementPooling(client: pg.PoolClient): Promise<void> {
  // PgBouncer answers the BEGIN with that error and closes the connection: the error can
  // come as the query's or as the client's 'error' event, which must not go unheard.
  const seen: unknown[] = [];
  const onError = (error: Error): void => void seen.push(error);
  client.on('error', onError);
  // Separate messages, as a batch sends them: one message holding a whole transaction
  // ends outside it, and PgBouncer lets that through.
  try {
    await client.query('BEGIN');
    await client.query('SELECT 1');
    await client.query('COMMIT');
  } catch (error) {
    seen.push(error);
    await client.query('ROLLBACK').catch(() => undefined);
    if (seen.some((e) => /statement pooling/i.test(String((e as { message?: unknown } | undefined)?.message)))) {
      throw new ConfigError(
        'pool_mode',
        'the connection pooler in front of Postgres runs in statement mode, which refuses the transactions every relay batch needs: set pool_mode = transaction (or session) for this database in its configuration (pgbouncer.ini)',
      );
    }
    throw error;
  } finally {
    client.off('error', onError);
  }
}

/**
 * The ConfigError of a relay told `pooler: 'none'` whose connections do go through a
 * transaction-pooling proxy: its prepared statements would vanish between transactions.
 */
export function poolerRefused(evidence: string): ConfigError {
  return new ConfigError(
    '--pooler',
    `Postgres connections go through a transaction-pooling proxy (${evidence}), but the relay was told there is none (--pooler none, OUTBOX_POOLER=none): start it with --pooler transaction (OUTBOX_POOLER=transaction; pooler: 'transaction' in the library), or connect it to Postgres directly`,
  );
}

/**
 * Whether a batch failed because statements prepared on its connection vanished or were
 * another session's: a prepared statement missing (26000) or already there (42P05). On a
 * direct connection neither happens (the relay prepares once per connection); behind a
 * transaction pooler they are what every batch does.
 */
export function preparedStatementsLost(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return code === '26000' || code === '42P05';
}
