import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { BatchContext, HandlerContext } from '../src/consumer/types.js';
import { HandlerClientClosed } from '../src/consumer/clientGuard.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyBatchEffect, applyEffect, committedOffset, countRows, createEffectTables, effectCounts, produce, testConsumers } from './helpers/consumer.js';

// ctx.client and the context's helpers belong to one run of a handler: once it is over
// (the transaction committed, or is going on with other messages), every use is refused
// with HandlerClientClosed and nothing reaches Postgres. Before, an afterCommit hook's
// INSERT on ctx.client ran outside any transaction on a connection already back in the
// pool (issue 33, item 13).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('clientafter');
  await createEffectTables(db.pool, db.schema);
  await db.pool.query(`CREATE TABLE "${db.schema}".late (note text NOT NULL)`);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db);

type Use = (context: HandlerContext | BatchContext, note: string) => Promise<unknown>;

/** Every way a context reaches Postgres, each writing (or locking) with `note`. */
const USES: Record<string, Use> = {
  'client.query (promise)': (context, note) => context.client.query(`INSERT INTO "${db.schema}".late VALUES ($1)`, [note]),
  'client.query (config object)': (context, note) => context.client.query({ text: `INSERT INTO "${db.schema}".late VALUES ($1)`, values: [note] }),
  'client.query (callback)': (context, note) =>
    new Promise((resolve, reject) => {
      context.client.query(`INSERT INTO "${db.schema}".late VALUES ($1)`, [note], (error: Error | undefined, result: unknown) => (error ? reject(error) : resolve(result)));
    }),
  advanceVersion: (context, note) => context.advanceVersion(`late:${note}`, 1),
  lockEntity: (context, note) => context.lockEntity(`late:${note}`),
};

/** What each use gave: the error it was refused with, or 'sent'. */
async function useAll(context: HandlerContext | BatchContext, tag: string): Promise<Map<string, unknown>> {
  const out = new Map<string, unknown>();
  for (const [name, use] of Object.entries(USES)) {
    try {
      await use(context, `${tag} ${name}`);
      out.set(name, 'sent');
    } catch (error) {
      out.set(name, error);
    }
  }
  return out;
}

function assertAllRefused(results: Map<string, unknown>, where: string): void {
  assert.equal(results.size, Object.keys(USES).length, `${where}: every use tried`);
  for (const [name, result] of results) {
    assert.ok(result instanceof HandlerClientClosed, `${where}: ${name} refused with HandlerClientClosed, got ${result instanceof Error ? `${result.name}: ${result.message}` : String(result)}`);
    assert.equal((result as HandlerClientClosed).retriable, false);
    assert.match((result as Error).message, /used after its handler's run was over/);
  }
}

async function lateRows(): Promise<number> {
  return countRows(db.pool, `SELECT 1 FROM "${db.schema}".late`);
}

for (const savepoints of ['on-failure', 'always'] as const) {
  test(`integration: an afterCommit hook that uses ctx.client, advanceVersion or lockEntity is refused (HandlerClientClosed), nothing is written, the effects committed (savepoints ${savepoints})`, async () => {
    const topic = await createTopic(1);
    const hookResults: Array<Map<string, unknown>> = [];
    const errors: unknown[] = [];
    const c = consumer({
      topics: topic,
      savepoints,
      messagesPerTransaction: 10,
      handler: async (message, context) => {
        await applyEffect(db.schema, message, context);
        context.afterCommit(async () => {
          hookResults.push(await useAll(context, `hook ${message.offset}`));
        });
      },
    });
    c.on('afterCommitError', (e) => void errors.push(e.error));
    const sent = await produce(topic, [{ key: 'a', value: { amount: 1 } }, { key: 'b', value: { amount: 2 } }]);
    await c.start();
    await waitFor('both offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '2');
    // Precondition: the hooks ran, after the COMMIT of the effects.
    assert.equal(hookResults.length, 2, 'both hooks ran');
    const counts = await effectCounts(db.pool, db.schema, topic);
    for (const e of sent) assert.equal(counts.get(e.messageId as string), 1, 'the handler effects committed once');
    for (const [i, results] of hookResults.entries()) assertAllRefused(results, `hook ${i}`);
    assert.equal(await lateRows(), 0, 'no statement of a hook reached Postgres');
    assert.equal(errors.length, 0, 'the hooks caught the refusals: nothing else reported');
  });
}

test('integration: a batch handler context kept past its run refuses every use (HandlerClientClosed), in its hook and afterwards; nothing is written', async () => {
  const topic = await createTopic(1);
  const hookResults: Array<Map<string, unknown>> = [];
  let kept: BatchContext | undefined;
  const c = consumer({
    topics: topic,
    handleBatch: async (messages, context) => {
      await applyBatchEffect(db.schema, messages, context);
      kept = context;
      context.afterCommit(async () => {
        hookResults.push(await useAll(context, 'batch hook'));
      });
    },
  });
  const sent = await produce(topic, [{ key: 'a' }, { key: 'b' }, { key: 'c' }]);
  await c.start();
  await waitFor('all offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '3');
  assert.ok(hookResults.length >= 1 && kept, 'the batch ran and its hook ran');
  const counts = await effectCounts(db.pool, db.schema, topic);
  for (const e of sent) assert.equal(counts.get(e.messageId as string), 1, 'the batch effects committed once');
  for (const results of hookResults) assertAllRefused(results, 'batch hook');
  // A callback that kept the context and runs later, with the connection long back in the pool.
  assertAllRefused(await useAll(kept, 'kept'), 'kept context');
  assert.equal(await lateRows(), 0, 'nothing reached Postgres');
});
