import type pg from 'pg';

/** A pooled connection holding one of the consumer's transactions. */
export interface Session {
  client: pg.PoolClient;
  /** The last 'error' the connection emitted while checked out (the pool listens only on idle clients). */
  broken: Error | undefined;
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
