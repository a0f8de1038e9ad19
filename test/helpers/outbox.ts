import { enqueue, type OutboxMessage } from '../../src/enqueue.js';
import type { TestSchema } from './db.js';

type Outbox = Pick<TestSchema, 'pool' | 'schema'>;

/** Enqueue `messages` in a transaction of their own and commit it; their outbox ids. */
export async function writeCommitted(db: Outbox, messages: OutboxMessage[]): Promise<number[]> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const ids = await enqueue(client, messages, { schema: db.schema });
    await client.query('COMMIT');
    return ids.map((r) => r.id as number);
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/** Rows of the outbox marked sent (of `topic`, when given). */
export async function sentCount(db: Outbox, topic?: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE sent_at IS NOT NULL${topic === undefined ? '' : ' AND topic = $1'}`,
    topic === undefined ? [] : [topic],
  );
  return rows[0]!.n;
}
