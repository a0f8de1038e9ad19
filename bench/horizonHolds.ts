/**
 * The three ways the held-horizon section (bench/sections/heldHorizon.ts) holds Postgres'
 * xmin horizon back, each a connection of its own left idle in its transaction:
 *
 * - `reader-other`: a REPEATABLE READ report on another table (its snapshot holds every
 *   row version newer than it: vacuum can remove none of what the outbox leaves dead);
 * - `reader-outbox`: the same report reading the outbox itself (it also holds a lock on
 *   the outbox, which a partition detach waits for);
 * - `xid`: a transaction that took a transaction id and touches nothing of the outbox
 *   (a write elsewhere left uncommitted; the relay's horizon sees it in flight).
 *
 * Each hold checks that it is in force (pg_stat_activity shows its backend_xmin, or its
 * backend_xid) before it is handed out: a hold that holds nothing fails the arm.
 */
import pg from 'pg';

export type HoldKind = 'reader-other' | 'reader-outbox' | 'xid';

export const HOLD_KINDS: readonly HoldKind[] = ['reader-other', 'reader-outbox', 'xid'];

export const HOLD_LABELS: Record<HoldKind, string> = {
  'reader-other': 'a REPEATABLE READ reader of another table',
  'reader-outbox': 'a REPEATABLE READ reader of the outbox',
  xid: 'a transaction holding a transaction id',
};

/** The table the `reader-other` and `xid` holds use: in the database, outside every arm's schema. */
const OTHER_TABLE = 'public.bench_held_horizon_other';

export interface Hold {
  kind: HoldKind;
  /** What pg_stat_activity showed for the holder once it held: its pid, xmin, xid. */
  holder: { pid: number; backendXmin: string | null; backendXid: string | null };
  release(): Promise<void>;
}

/** The other table, made once per database (a few rows: the report reads them). */
export async function prepareHolds(pool: pg.Pool): Promise<void> {
  await pool.query(`CREATE TABLE IF NOT EXISTS ${OTHER_TABLE} (id int PRIMARY KEY, note text)`);
  await pool.query(`INSERT INTO ${OTHER_TABLE} SELECT g, 'row ' || g FROM generate_series(1, 100) AS g ON CONFLICT DO NOTHING`);
}

/** Starts a hold of `kind` on `schema`'s outbox; it lasts until release(). */
export async function startHold(databaseUrl: string, kind: HoldKind, schema: string): Promise<Hold> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: `bench-hold-${kind}` });
  await client.connect();
  try {
    if (kind === 'xid') {
      await client.query('BEGIN');
      await client.query(`UPDATE ${OTHER_TABLE} SET note = note WHERE id = 1`);
    } else {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await client.query(kind === 'reader-other' ? `SELECT count(*) FROM ${OTHER_TABLE}` : `SELECT count(*) FROM "${schema}".outbox`);
    }
    const { rows } = await client.query<{ pid: number; xmin: string | null; xid: string | null }>(
      'SELECT pid, backend_xmin::text AS xmin, backend_xid::text AS xid FROM pg_stat_activity WHERE pid = pg_backend_pid()',
    );
    const holder = { pid: rows[0]!.pid, backendXmin: rows[0]!.xmin, backendXid: rows[0]!.xid };
    if (kind === 'xid' ? holder.backendXid === null : holder.backendXmin === null) {
      throw new Error(`bench: the ${kind} hold holds nothing (pg_stat_activity: ${JSON.stringify(holder)})`);
    }
    return {
      kind,
      holder,
      release: async () => {
        await client.query('ROLLBACK');
        await client.end();
      },
    };
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
}
