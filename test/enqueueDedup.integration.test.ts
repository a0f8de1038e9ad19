import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { enqueue, type OutboxMessage } from '../src/enqueue.js';
import { cleanupOutbox } from '../src/commands/cleanup.js';
import { OutboxError } from '../src/shared/errors.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('dedup');
});
after(async () => {
  await db.drop();
});

async function inTransaction<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

const send = (messages: OutboxMessage | OutboxMessage[]) => inTransaction((c) => enqueue(c, messages, { schema: db.schema }));

async function rows(where = 'TRUE'): Promise<Array<{ id: number; message_id: string; key: string; dedup_key: string | null; payload: unknown }>> {
  return (await db.pool.query(`SELECT id, message_id, key, dedup_key, payload FROM "${db.schema}".outbox WHERE ${where} ORDER BY id`)).rows;
}

test('integration: the same dedup key enqueued twice gives one row; the second call says duplicate and names the existing row', async () => {
  const [first] = await send({ topic: 't', key: 'order-1', payload: { n: 1 }, dedupKey: 'order-1:paid' });
  assert.ok(first?.inserted);
  const [second] = await send({ topic: 't', key: 'order-1', payload: { n: 2 }, dedupKey: 'order-1:paid' });
  assert.deepEqual(second, { inserted: false, id: first.id, messageId: first.messageId, dedupKey: 'order-1:paid' });
  const stored = await rows(`dedup_key = 'order-1:paid'`);
  assert.equal(stored.length, 1);
  assert.deepEqual(stored[0]!.payload, { n: 1 }, 'the first write wins');
  assert.equal(stored[0]!.message_id, first.messageId);
});

test('integration: one call mixing new, repeated and key-less messages reports each, in the order given', async () => {
  const [old] = await send({ topic: 't', key: 'k', dedupKey: 'mix-old' });
  const result = await send([
    { topic: 't', key: 'k', payload: { i: 0 } },
    { topic: 't', key: 'k', payload: { i: 1 }, dedupKey: 'mix-a' },
    { topic: 't', key: 'k', payload: { i: 2 }, dedupKey: 'mix-old' },
    { topic: 't', key: 'k', payload: { i: 3 }, dedupKey: 'mix-a' },
    { topic: 't', key: 'k', payload: { i: 4 } },
    { topic: 't', key: 'k', payload: { i: 5 }, dedupKey: 'mix-b' },
  ]);
  assert.deepEqual(result.map((r) => r.inserted), [true, true, false, false, true, true]);
  const inserted = result.filter((r) => r.inserted);
  const ids = inserted.map((r) => r.id as number);
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b), 'inserted rows take ids in list order');
  assert.equal(result[2]!.id, old!.id, 'duplicate of an earlier call: that row');
  assert.equal(result[2]!.messageId, old!.messageId);
  assert.equal(result[3]!.id, result[1]!.id, 'duplicate within the call: the first of the call');
  assert.equal(result[3]!.messageId, result[1]!.messageId);
  const stored = await rows(`id = ANY('{${ids.join(',')}}'::bigint[])`);
  assert.deepEqual(stored.map((r) => (r.payload as { i: number }).i), [0, 1, 4, 5]);
  assert.deepEqual(stored.map((r) => r.message_id), inserted.map((r) => r.messageId), 'returned message ids are the stored ones');
});

test('integration: a racing transaction with the same key waits for the first; duplicate if it commits, inserted if it rolls back', async () => {
  for (const outcome of ['COMMIT', 'ROLLBACK'] as const) {
    const dedupKey = `race-${outcome}`;
    const a = await db.pool.connect();
    const b = await db.pool.connect();
    try {
      await a.query('BEGIN');
      await enqueue(a, { topic: 't', key: 'r', dedupKey, payload: { from: 'a' } }, { schema: db.schema });
      await b.query('BEGIN');
      const bPid = (await b.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const pending = enqueue(b, { topic: 't', key: 'r', dedupKey, payload: { from: 'b' } }, { schema: db.schema });
      // b is blocked on a's uncommitted index entry.
      await waitFor('b to wait for a', async () => (await db.pool.query(`SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, [bPid])).rows[0]?.wait_event_type === 'Lock');
      await a.query(outcome);
      const [r] = await pending;
      await b.query('COMMIT');
      const stored = await rows(`dedup_key = '${dedupKey}'`);
      assert.equal(stored.length, 1);
      if (outcome === 'COMMIT') {
        assert.equal(r!.inserted, false);
        assert.deepEqual(stored[0]!.payload, { from: 'a' });
        assert.equal(r!.id, stored[0]!.id);
      } else {
        assert.equal(r!.inserted, true);
        assert.deepEqual(stored[0]!.payload, { from: 'b' });
      }
    } finally {
      a.release();
      b.release();
    }
  }
});

test('integration: once cleanup deletes the sent row, its dedup key can be enqueued again (the dedup window)', async () => {
  const [first] = await send({ topic: 't', key: 'w', dedupKey: 'window-1' });
  await db.pool.query(`UPDATE "${db.schema}".outbox SET sent_at = now() - interval '2 hours' WHERE id = $1`, [first!.id]);
  assert.equal((await send({ topic: 't', key: 'w', dedupKey: 'window-1' }))[0]!.inserted, false, 'sent but kept: still a duplicate');
  await cleanupOutbox({ pool: db.pool, schema: db.schema, retention: '1h' });
  const [again] = await send({ topic: 't', key: 'w', dedupKey: 'window-1' });
  assert.equal(again!.inserted, true);
  assert.notEqual(again!.id, first!.id);
});

test('integration: a bad dedup key is refused before anything is written', async () => {
  const before = await rows();
  for (const bad of ['', 42 as unknown as string]) {
    await assert.rejects(
      send([{ topic: 't', key: 'v', dedupKey: 'fine' }, { topic: 't', key: 'v', dedupKey: bad }]),
      (e: unknown) => e instanceof OutboxError && /message 1: dedupKey must be a non-empty string/.test(e.message),
    );
  }
  assert.deepEqual(await rows(), before);
});
