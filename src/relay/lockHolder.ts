import type pg from 'pg';
import { oldestLockHolderSql, type LockHolderRow } from './sql/lockHolders.js';

/** An open transaction holding a lock on the outbox, as logs, `status` and the console name it. */
export interface OutboxLockHolder {
  pid: number;
  applicationName: string | null;
  state: string | null;
  transactionAgeSeconds: number | null;
}

/** The oldest such transaction, or null (see {@link oldestLockHolderSql} for `writersOnly`). */
export async function oldestLockHolder(db: pg.ClientBase | pg.Pool, quotedSchema: string, writersOnly: boolean): Promise<OutboxLockHolder | null> {
  const { rows } = await db.query<LockHolderRow>(oldestLockHolderSql(quotedSchema, writersOnly));
  const r = rows[0];
  return r ? { pid: r.pid, applicationName: r.application_name, state: r.state, transactionAgeSeconds: r.transaction_age_seconds } : null;
}
