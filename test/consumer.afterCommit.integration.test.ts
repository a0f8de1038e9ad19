import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ConsumerEvents } from '../src/consumer/types.js';
import { OutboxError } from '../src/shared/errors.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, committedOffset, countRows, createEffectTables, effectCounts, produce, testConsumers } from './helpers/consumer.js';

// ctx.afterCommit(fn): runs after the COMMIT of the message's transaction, only for the
// run of a handler that committed; a failing hook is counted and changes nothing else.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('aftercommit');
  await createEffectTables(db.pool, db.schema);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db);


test('integration: afterCommit hooks run after the COMMIT (another connection sees the effect and the dedup row), in offset order', async () => {
  const topic = await createTopic(1);
  const seen: Array<{ offset: string; effects: number; processed: number }> = [];
  let groupId = '';
  const c = consumer<{ amount: number }>({
    topics: topic,
    messagesPerTransaction: 10,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      context.afterCommit(async () => {
        // db.pool is another connection: it sees only committed rows.
        const effects = await countRows(db.pool, `SELECT 1 FROM "${db.schema}".effects WHERE message_id = $1`, [message.messageId]);
        const processed = await countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1 AND key = $2`, [groupId, message.idempotencyKey]);
        seen.push({ offset: message.offset, effects, processed });
      });
    },
  });
  groupId = c.options.groupId;
  await produce(topic, Array.from({ length: 6 }, (_, i) => ({ key: 'h', value: { amount: i + 1 } })));
  await c.start();
  await waitFor('six hooks', () => seen.length === 6);
  assert.deepEqual(seen.map((s) => s.offset), ['0', '1', '2', '3', '4', '5'], 'in offset order');
  for (const s of seen) {
    assert.equal(s.effects, 1, `effect of offset ${s.offset} committed when its hook ran`);
    assert.equal(s.processed, 1, `dedup row of offset ${s.offset} committed when its hook ran`);
  }
  await waitFor('offset committed', async () => (await committedOffset(groupId, topic)) === '6');
  assert.equal(c.stats().afterCommitErrors, 0);
});

for (const savepoints of ['on-failure', 'always'] as const) {
  test(`integration: afterCommit hooks do not run for a failed message, a rolled-back run or a swallowed database error (savepoints ${savepoints})`, async () => {
    const topic = await createTopic(1);
    const deadLetterTopic = await createTopic(1, undefined, 'dlt');
    const calls = new Map<string, number>();
    const hooks: string[] = [];
    const c = consumer<{ amount: number; invalid?: boolean; swallow?: boolean; flaky?: boolean }>({
      topics: topic,
      deadLetterTopic,
      savepoints,
      maxAttempts: 2,
      messagesPerTransaction: 20,
      handler: async (message, context) => {
        const run = (calls.get(message.offset) ?? 0) + 1;
        calls.set(message.offset, run);
        await applyEffect(db.schema, message, context);
        context.afterCommit(() => {
          hooks.push(message.offset);
        });
        if (message.value.invalid) throw new OutboxError('invalid', { retriable: false });
        if (message.value.flaky) throw Object.assign(new Error('try again'), { retriable: true });
        if (message.value.swallow) await context.client.query('SELECT 1/0').catch(() => undefined);
      },
    });
    // 3 fails for good, 5 leaves its transaction aborted, 7 fails twice (retries exhausted).
    const values = Array.from({ length: 10 }, (_, i) => ({ amount: i + 1, invalid: i === 3, swallow: i === 5, flaky: i === 7 }));
    const sent = await produce(topic, values.map((value) => ({ key: 'f', value })));
    await c.start();
    await waitFor('all handled', () => c.stats().processed === 7 && c.stats().deadLettered === 3);
    await waitFor('offset committed', async () => (await committedOffset(c.options.groupId, topic)) === '10');
    assert.deepEqual(hooks, ['0', '1', '2', '4', '6', '8', '9'], 'one hook per committed message, in order; none for 3, 5 and 7');
    if (savepoints === 'on-failure') {
      assert.ok([...calls.values()].some((n) => n > 1), 'some handlers ran twice (rolled-back runs), yet their hooks fired once');
    }
    const counts = await effectCounts(db.pool, db.schema, topic);
    for (const [i, e] of sent.entries()) assert.equal(counts.get(e.messageId as string), [3, 5, 7].includes(i) ? undefined : 1);
    assert.equal(c.stats().afterCommitErrors, 0);
  });
}

test('integration: afterCommit hooks do not run for duplicates', async () => {
  const topic = await createTopic(1);
  const hooks: string[] = [];
  const c = consumer<{ amount: number }>({
    topics: topic,
    messagesPerTransaction: 3,
    handler: async (message, context) => {
      await applyEffect(db.schema, message, context);
      context.afterCommit(() => {
        hooks.push(message.messageId as string);
      });
    },
  });
  const sent = await produce(topic, Array.from({ length: 4 }, (_, i) => ({ key: 'd', value: { amount: i } })));
  await produce(topic, sent); // the same message ids again: duplicates
  await c.start();
  await waitFor('all deliveries', () => c.stats().processed + c.stats().duplicates === 8);
  await waitFor('offset committed', async () => (await committedOffset(c.options.groupId, topic)) === '8');
  assert.equal(c.stats().duplicates, 4);
  assert.deepEqual(hooks, sent.map((e) => e.messageId), 'one hook per message id');
});

test('integration: a throwing or rejecting afterCommit hook is counted and reported; the message is not redelivered and the partition goes on', async () => {
  const topic = await createTopic(1);
  const calls = new Map<string, number>();
  const ran: string[] = [];
  const reported: Array<ConsumerEvents['afterCommitError']> = [];
  const c = consumer<{ amount: number; hook: 'throw' | 'reject' | 'ok' }>({
    topics: topic,
    messagesPerTransaction: 10,
    handler: async (message, context) => {
      calls.set(message.offset, (calls.get(message.offset) ?? 0) + 1);
      await applyEffect(db.schema, message, context);
      const kind = message.value.hook;
      context.afterCommit(() => {
        ran.push(message.offset);
        if (kind === 'throw') throw new Error('cache unreachable');
        if (kind === 'reject') return Promise.reject(new Error('cache timed out'));
        return undefined;
      });
      // A second hook of the same message still runs after the first failed.
      context.afterCommit(() => {
        ran.push(`${message.offset}b`);
      });
    },
  });
  c.on('afterCommitError', (e) => reported.push(e));
  await produce(topic, [
    { key: 'e', value: { amount: 1, hook: 'throw' } },
    { key: 'e', value: { amount: 2, hook: 'reject' } },
    { key: 'e', value: { amount: 3, hook: 'ok' } },
  ]);
  await c.start();
  await waitFor('offset committed', async () => (await committedOffset(c.options.groupId, topic)) === '3');
  // The partition is not paused: later messages flow.
  await produce(topic, [{ key: 'e', value: { amount: 4, hook: 'ok' } }]);
  await waitFor('later message handled', () => c.stats().processed === 4);
  await waitFor('its offset committed', async () => (await committedOffset(c.options.groupId, topic)) === '4');

  assert.deepEqual(ran, ['0', '0b', '1', '1b', '2', '2b', '3', '3b']);
  assert.equal(c.stats().afterCommitErrors, 2);
  assert.deepEqual(reported.map((e) => [e.offset, (e.error as Error).message]), [['0', 'cache unreachable'], ['1', 'cache timed out']]);
  assert.equal(reported[0]?.topic, topic);
  assert.ok(reported[0]?.idempotencyKey);
  assert.deepEqual([...calls.values()], [1, 1, 1, 1], 'each handler ran once: nothing redelivered');
  const stats = c.stats();
  assert.equal(stats.retries, 0);
  assert.equal(stats.duplicates, 0);
  assert.equal(stats.infrastructureErrors, 0);
  assert.equal(stats.deadLettered, 0);
});

test('integration: afterCommit called after the handler returned is refused', async () => {
  const topic = await createTopic(1);
  let late: unknown;
  let register: (() => void) | undefined;
  const c = consumer({
    topics: topic,
    handler: async (_message, context) => {
      register = () => context.afterCommit(() => undefined);
    },
  });
  await produce(topic, [{ key: 'l', value: { amount: 1 } }]);
  await c.start();
  await waitFor('handled', () => c.stats().processed === 1);
  try {
    register?.();
  } catch (error) {
    late = error;
  }
  assert.match((late as Error)?.message ?? '', /after the handler returned/);
});
