import type pg from 'pg';
import { beginSql } from './clientGuard.js';

/** A pooled connection holding one of the consumer's transactions. */
export interface Session {
  client: pg.PoolClient;
  /** The last 'error' the connection emitted while checked out (the pool listens only on idle clients). */
  broken: Error | undefined;
  /** The server process of the transaction, once begun (see {@link begin}). */
  backendPid: number | undefined;
  /** Return it to the pool, or destroy it when given an error; once. */
  release(destroyWith?: Error): void;
}

/**
 * A pooled connection for one transaction, tracked in `active` so a hard stop can destroy
 * it (which rolls its transaction back on the server).
 */
export async function checkOut(pool: pg.Pool, active: Set<pg.PoolClient>): Promise<Session> {
  const client = await pool.connect();
  const session: Session = {
    client,
    broken: undefined,
    backendPid: undefined,
    release: (destroyWith?: Error): void => {
      if (active.delete(client)) {
        client.off('error', onError);
        client.release(destroyWith);
      }
    },
  };
  const onError = (error: Error): void => {
    session.broken = error;
  };
  client.on('error', onError);
  active.add(client);
  return session;
}

/** BEGIN with the transaction's marker (clientGuard.ts), noting the server process id. */
export async function begin(session: Session, marker: string): Promise<void> {
  const results = (await session.client.query(beginSql(marker))) as unknown as Array<{ rows: Array<{ pid?: unknown }> }>;
  const pid = results[1]?.rows[0]?.pid;
  session.backendPid = typeof pid === 'number' ? pid : undefined;
}
