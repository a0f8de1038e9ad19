import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import type { HandlerContext } from '../src/consumer/types.js';
import { DEAD_LETTER_HEADERS } from '../src/consumer/deadLetterTopic.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { applyEffect, committedOffset, countRows, createEffectTables, effectCounts, produce, testConsumers } from './helpers/consumer.js';

// A handler that ends the consumer's transaction (COMMIT, ROLLBACK, BEGIN... on
// ctx.client) must fail its own message loudly, never make the runtime record the
// messages after it as processed without running their handlers (issue 11, item 5).

let db: TestSchema;
before(async () => {
  db = await createTestSchema('txcontrol');
  await createEffectTables(db.pool, db.schema);
  await db.pool.query(`
    CREATE TABLE "${db.schema}".notes (note text PRIMARY KEY);
    CREATE FUNCTION "${db.schema}".note(t text) RETURNS void LANGUAGE sql AS $$ INSERT INTO "${db.schema}".notes VALUES (t) $$;
    CREATE PROCEDURE "${db.schema}".commit_inside() LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$;`);
});
after(async () => {
  await db.drop();
});

const consumer = testConsumers(() => db, () => ({ maxAttempts: 1 }));


/** Sends `sql` past the guard of ctx.client, as code holding pg's own query method could. */
function bypass(context: HandlerContext, sql: string): Promise<unknown> {
  return (pg.Client.prototype.query as (this: unknown, text: string) => Promise<unknown>).call(context.client, sql);
}

type Act = (context: HandlerContext) => Promise<unknown>;

const MISBEHAVING = 2;

/**
 * Five messages of one partition in one transaction; the third (offset 2) has its effect,
 * then does `act`. Returns when all five offsets are committed.
 */
async function run(act: Act, savepoints: 'on-failure' | 'always' = 'on-failure', pool: pg.Pool = db.pool) {
  const topic = await createTopic(1);
  const deadLetterTopic = await createTopic(1, undefined, 'dlt');
  const ran: string[] = [];
  const c = consumer<{ amount: number; act?: boolean }>({
    topics: topic,
    deadLetterTopic,
    savepoints,
    pool,
    messagesPerTransaction: 10,
    handler: async (message, context) => {
      ran.push(message.offset);
      await applyEffect(db.schema, message, context);
      if (message.value.act) await act(context);
    },
  });
  const sent = await produce(topic, Array.from({ length: 5 }, (_, i) => ({ key: 'k', value: { amount: i + 1, act: i === MISBEHAVING } })));
  await c.start();
  await waitFor('all offsets committed', async () => (await committedOffset(c.options.groupId, topic)) === '5');
  const counts = await effectCounts(db.pool, db.schema, topic);
  const recorded = async (i: number): Promise<number> =>
    countRows(db.pool, `SELECT 1 FROM "${db.schema}".processed_messages WHERE consumer_group = $1 AND key = $2`, [c.options.groupId, sent[i]?.messageId]);
  return { c, topic, deadLetterTopic, sent, counts, recorded, ran };
}

/** The outcome every misbehaving handler must have: its message dead-lettered, every other handled once. */
async function assertFailedLoudly(r: Awaited<ReturnType<typeof run>>, errorName: string): Promise<void> {
  const stats = r.c.stats();
  assert.equal(stats.deadLettered, 1, 'the misbehaving message is dead-lettered');
  // Messages before it that the handler committed come again as duplicates.
  assert.equal(stats.processed + stats.duplicates, 4, 'every other message processed');
  for (const [i, e] of r.sent.entries()) {
    if (i === MISBEHAVING) continue;
    assert.equal(r.counts.get(e.messageId as string), 1, `effect of message ${i} once`);
    assert.equal(await r.recorded(i), 1, `message ${i} recorded as processed`);
  }
  assert.equal(await r.recorded(MISBEHAVING), 0, 'the failed message is not recorded as processed');
  for (const offset of ['3', '4']) assert.ok(r.ran.includes(offset), `the handler of offset ${offset} ran`);
  const [dead] = await readTopic(r.deadLetterTopic, (m) => m.length >= 1);
  assert.equal(dead?.headers[DEAD_LETTER_HEADERS.offset], String(MISBEHAVING));
  assert.equal(dead?.headers[DEAD_LETTER_HEADERS.reason], 'permanent-error');
  assert.equal(dead?.headers[DEAD_LETTER_HEADERS.errorName], errorName);
}

const refused: Array<[string, Act]> = [
  ['COMMIT', (ctx) => ctx.client.query('COMMIT')],
  ['ROLLBACK', (ctx) => ctx.client.query('ROLLBACK')],
  ['BEGIN', (ctx) => ctx.client.query('BEGIN')],
  ['END', (ctx) => ctx.client.query('end')],
  ['ABORT', (ctx) => ctx.client.query('ABORT')],
  ['START TRANSACTION', (ctx) => ctx.client.query('START TRANSACTION ISOLATION LEVEL SERIALIZABLE')],
  ['COMMIT AND CHAIN', (ctx) => ctx.client.query('COMMIT AND CHAIN')],
  ['a multi-statement string', (ctx) => ctx.client.query(`SELECT 'a;b' AS x; Commit; SELECT 2`)],
  ['a COMMIT behind comments', (ctx) => ctx.client.query('/* a /* nested */ comment */ -- and a line\n  commit work')],
  ['a query config', (ctx) => ctx.client.query({ text: 'ROLLBACK' })],
  ['the callback form', (ctx) => new Promise<void>((resolve, reject) => ctx.client.query('COMMIT', (error: Error | undefined) => (error ? reject(error) : resolve())))],
  ['a COMMIT whose error the handler caught', (ctx) => ctx.client.query('COMMIT').catch(() => undefined)],
  ['release()', async (ctx) => ctx.client.release()],
];

for (const [name, act] of refused) {
  test(`integration: a handler that sends ${name} on ctx.client is refused before it reaches Postgres; its message is dead-lettered, the others handled`, async () => {
    const r = await run(act);
    await assertFailedLoudly(r, 'TransactionControlRefused');
    assert.equal(r.counts.get(r.sent[MISBEHAVING]?.messageId as string), undefined, 'its effect is rolled back: nothing was committed');
    assert.equal(r.c.stats().processed, 4);
  });
}

test('integration: with savepoints always, a handler COMMIT or a ROLLBACK TO the consumer\'s savepoint is refused', async () => {
  for (const act of [(ctx: HandlerContext) => ctx.client.query('COMMIT'), (ctx: HandlerContext) => ctx.client.query('ROLLBACK TO SAVEPOINT "outbox_relay_message"')]) {
    const r = await run(act, 'always');
    await assertFailedLoudly(r, 'TransactionControlRefused');
    assert.equal(r.counts.get(r.sent[MISBEHAVING]?.messageId as string), undefined);
  }
});

const bypassing: Array<[string, string, 'on-failure' | 'always']> = [
  ['COMMIT', 'COMMIT', 'on-failure'],
  ['ROLLBACK', 'ROLLBACK', 'on-failure'],
  ['COMMIT AND CHAIN', 'COMMIT AND CHAIN', 'on-failure'],
  ['COMMIT then BEGIN in one string', 'SELECT 1; COMMIT; BEGIN', 'on-failure'],
  ['COMMIT AND CHAIN', 'COMMIT AND CHAIN', 'always'],
  ['ROLLBACK', 'ROLLBACK', 'always'],
];

for (const [name, sql, savepoints] of bypassing) {
  test(`integration: a handler whose ${name} gets past the guard is caught after it returns (savepoints ${savepoints}); its message is dead-lettered, the others handled`, async () => {
    const r = await run((ctx) => bypass(ctx, sql), savepoints);
    await assertFailedLoudly(r, 'HandlerEndedTransaction');
  });
}

test('integration: with a pg that cannot report its transaction status, the marker alone catches a handler that ended the transaction', async () => {
  const pool = new pg.Pool({ connectionString: db.databaseUrl, max: 4 });
  // As a pg from before Client#getTransactionStatus would be.
  pool.on('connect', (client) => {
    Object.defineProperty(client, 'getTransactionStatus', { value: undefined });
  });
  try {
    for (const sql of ['COMMIT', 'COMMIT AND CHAIN']) {
      const r = await run((ctx) => bypass(ctx, sql), 'on-failure', pool);
      await assertFailedLoudly(r, 'HandlerEndedTransaction');
      await r.c.stop();
    }
  } finally {
    await pool.end();
  }
});

test('integration: a procedure that tries to COMMIT inside the transaction fails in Postgres: the message fails, nothing is lost', async () => {
  const r = await run((ctx) => ctx.client.query(`CALL "${db.schema}".commit_inside()`));
  const stats = r.c.stats();
  assert.equal(stats.deadLettered, 1);
  assert.equal(stats.processed, 4);
  assert.equal(await r.recorded(MISBEHAVING), 0);
  assert.equal(await r.recorded(4), 1);
  const [dead] = await readTopic(r.deadLetterTopic, (m) => m.length >= 1);
  assert.match(dead?.headers[DEAD_LETTER_HEADERS.error] ?? '', /invalid transaction termination/);
});

test('integration: legitimate SQL is not refused: a SQL function, transaction words inside literals and comments, DO blocks, the handler\'s own savepoints', async () => {
  for (const savepoints of ['on-failure', 'always'] as const) {
    const note = uniqueName('note');
    const r = await run(async (ctx) => {
      await ctx.client.query(`SELECT "${db.schema}".note($1)`, [note]);
      await ctx.client.query(`SELECT 'COMMIT; ROLLBACK' AS a, E'\\'; BEGIN' AS b, $tag$; END$tag$ AS c, "commit" FROM (SELECT 1 AS "commit") q -- ; COMMIT`);
      await ctx.client.query('DO $$ BEGIN PERFORM 1; END $$');
      await ctx.client.query('SAVEPOINT mine');
      await ctx.client.query(`SELECT "${db.schema}".note($1)`, [note]).catch(() => undefined); // unique violation
      await ctx.client.query('ROLLBACK TO SAVEPOINT mine');
      await ctx.client.query('RELEASE mine');
      await ctx.client.query(`CREATE FUNCTION "${db.schema}".${note}() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END`);
    }, savepoints);
    const stats = r.c.stats();
    assert.equal(stats.deadLettered, 0, `nothing dead-lettered (savepoints ${savepoints})`);
    assert.equal(stats.processed, 5);
    for (const e of r.sent) assert.equal(r.counts.get(e.messageId as string), 1);
    assert.equal(await countRows(db.pool, `SELECT 1 FROM "${db.schema}".notes WHERE note = $1`, [note]), 1, 'the function\'s effect committed once');
  }
});
