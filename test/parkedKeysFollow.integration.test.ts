import { test, after, before, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { replayDeadLetters } from '../src/commands/deadLetters.js';
import { discardDeadLettersSql } from '../src/commands/sql/deadLetters.js';
import { formatStatus, getStatus } from '../src/commands/status.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';

// Issue 33, item 10: a key is parked exactly while it has dead letters with policy park,
// whatever removed or changed them (a command, or SQL typed by an operator); `status`
// flags any other state. Dead letters are made here the way the relay makes them: the row
// in outbox_dead_letters and, for policy park, its key in outbox_parked_keys.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('parkfollow');
});
after(async () => {
  await db.drop();
});
beforeEach(async () => {
  await db.pool.query(`TRUNCATE ${T('outbox')}, ${T('outbox_dead_letters')}, ${T('outbox_parked_keys')}`);
});

const T = (table: string): string => `"${db.schema}".${table}`;

async function deadLetter(topic: string, key: string, policy: 'park' | 'skip' = 'park'): Promise<number> {
  const { rows } = await db.pool.query<{ id: number }>(
    `INSERT INTO ${T('outbox_dead_letters')} (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy)
     VALUES (nextval('${db.schema}.outbox_id_seq'), gen_random_uuid(), $1, $2, '{}', now(), 1, 'the topic is not a legal Kafka topic name', 'validation:invalid_topic', $3)
     RETURNING id`,
    [topic, key, policy],
  );
  const id = Number(rows[0]!.id);
  if (policy === 'park') {
    await db.pool.query(`INSERT INTO ${T('outbox_parked_keys')} (topic, key, dead_letter_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [topic, key, id]);
  }
  return id;
}

async function parked(): Promise<Array<[string, string, number]>> {
  return (await db.pool.query(`SELECT topic, key, dead_letter_id FROM ${T('outbox_parked_keys')} ORDER BY topic, key`)).rows.map((r) => [r.topic, r.key, Number(r.dead_letter_id)]);
}

const conn = () => ({ pool: db.pool, schema: db.schema });

test('integration: a dead letter whose topic was corrected by SQL moves its park along; the replay releases it and no park is left behind', async () => {
  const id = await deadLetter('orders!', 'order-42');
  assert.deepEqual(await parked(), [['orders!', 'order-42', id]], 'precondition: the key is parked behind the dead letter');

  await db.pool.query(`UPDATE ${T('outbox_dead_letters')} SET topic = 'orders' WHERE id = $1`, [id]);
  assert.deepEqual(await parked(), [['orders', 'order-42', id]], 'the old key is released, the corrected key parked behind it');

  const r = await replayDeadLetters({ ...conn(), ids: [id], rate: 1000 });
  assert.equal(r.replayed, 1);
  assert.deepEqual(r.releasedKeys, [{ topic: 'orders', key: 'order-42', deadLetterId: id }], 'the replay says it released the key');
  assert.deepEqual(await parked(), [], 'no park is left behind a dead letter that no longer exists');
  assert.deepEqual((await getStatus(conn())).parkedKeys.outOfStep, { parksWithoutDeadLetter: 0, deadLettersWithoutPark: 0 });
});

test('integration: SQL DELETE of park dead letters hands the park to the key\'s lowest remaining one, then releases the key; a policy change and TRUNCATE do too', async () => {
  const a = await deadLetter('orders', 'k');
  const b = await deadLetter('orders', 'k');
  await db.pool.query(`UPDATE ${T('outbox_dead_letters')} SET policy = 'park' WHERE id = $1`, [b]);
  const skip = await deadLetter('orders', 'k', 'skip');
  assert.deepEqual(await parked(), [['orders', 'k', a]], 'precondition: parked behind the lowest');

  await db.pool.query(`DELETE FROM ${T('outbox_dead_letters')} WHERE id = $1`, [a]);
  assert.deepEqual(await parked(), [['orders', 'k', b]], 'handed on to the remaining park dead letter');
  await db.pool.query(`DELETE FROM ${T('outbox_dead_letters')} WHERE id = $1`, [b]);
  assert.deepEqual(await parked(), [], 'released: only a skip dead letter is left');
  assert.deepEqual((await db.pool.query(`SELECT id FROM ${T('outbox_dead_letters')}`)).rows.map((r) => Number(r.id)), [skip]);

  const c = await deadLetter('orders', 'm');
  await db.pool.query(`UPDATE ${T('outbox_dead_letters')} SET policy = 'skip' WHERE id = $1`, [c]);
  assert.deepEqual(await parked(), [], 'a park dead letter turned skip by SQL releases its key');
  await db.pool.query(`UPDATE ${T('outbox_dead_letters')} SET policy = 'park' WHERE id = $1`, [c]);
  assert.deepEqual(await parked(), [['orders', 'm', c]], 'and turned back to park parks it again');

  await db.pool.query(`TRUNCATE ${T('outbox_dead_letters')}`);
  assert.deepEqual(await parked(), [], 'no dead letters, no parks');
});

test('integration: two transactions each deleting one of a key\'s two park dead letters release the key once both commit', async () => {
  const a = await deadLetter('orders', 'k');
  const b = await deadLetter('orders', 'k');
  await db.pool.query(`UPDATE ${T('outbox_dead_letters')} SET policy = 'park' WHERE id = $1`, [b]);
  assert.deepEqual(await parked(), [['orders', 'k', a]]);
  const one = new pg.Client({ connectionString: db.databaseUrl });
  const two = new pg.Client({ connectionString: db.databaseUrl });
  let twoPid = 0;
  await one.connect();
  await two.connect();
  twoPid = Number((await two.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
  try {
    await one.query('BEGIN');
    await two.query('BEGIN');
    // The first hands the park on to b; the second, which cannot see that yet, removes b.
    await one.query(discardDeadLettersSql(`"${db.schema}"`), [[a]]);
    let settled = false;
    const second = two.query(`DELETE FROM ${T('outbox_dead_letters')} WHERE id = $1`, [b]).finally(() => (settled = true));
    // Precondition: the second statement ran while the first was uncommitted (it finished,
    // or it waits on a lock the first holds), so neither saw the other's delete.
    await waitFor('the second delete to finish or wait on the first', async () =>
      settled || (await db.pool.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, [twoPid])).rowCount === 1,
    );
    await one.query('COMMIT');
    await second;
    await two.query('COMMIT');
    assert.deepEqual(await parked(), [], 'released: no park left behind a deleted dead letter');
  } finally {
    await one.end();
    await two.end();
  }
});

test('integration: status flags parks out of step with the dead letters (written by hand), and names the fix', async () => {
  await db.pool.query(`INSERT INTO ${T('outbox_parked_keys')} (topic, key, dead_letter_id) VALUES ('orders', 'ghost', 999999999)`);
  await db.pool.query(
    `INSERT INTO ${T('outbox_dead_letters')} (id, message_id, topic, key, created_at, attempts, reason, error_name, policy)
     VALUES (nextval('${db.schema}.outbox_id_seq'), gen_random_uuid(), 'orders', 'loose', now(), 1, 'r', 'E', 'park')`,
  );
  const status = await getStatus(conn());
  assert.deepEqual(status.parkedKeys.outOfStep, { parksWithoutDeadLetter: 1, deadLettersWithoutPark: 1 });
  assert.match(formatStatus(status), /^parked keys out of step with their dead letters: 1 parked behind a dead letter that is gone .*, 1 park dead letters whose key is not parked; fix: docs\/runbook.md/m);

  const cli = spawnCli(['status'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'silent' });
  assert.equal(await cli.exited, 0, cli.output());
  assert.match(cli.output(), /parked keys out of step with their dead letters: 1 parked behind/);

  // The runbook's fixes: touching the policy puts the park in step; unpark releases the ghost.
  await db.pool.query(`UPDATE ${T('outbox_dead_letters')} SET policy = 'park' WHERE key = 'loose'`);
  assert.deepEqual((await getStatus(conn())).parkedKeys.outOfStep, { parksWithoutDeadLetter: 1, deadLettersWithoutPark: 0 });
});

test('integration: unpark of a key parked behind a dead letter that no longer exists says so, instead of naming dead letters that stay', async () => {
  // Only hand-written SQL can leave such a park now (the triggers release the others).
  await db.pool.query(`INSERT INTO ${T('outbox_parked_keys')} (topic, key, dead_letter_id) VALUES ('orders', 'ghost', 999999999)`);
  assert.equal((await getStatus(conn())).parkedKeys.outOfStep.parksWithoutDeadLetter, 1, 'precondition: the park has no dead letter');
  const cli = spawnCli(['dead-letters', 'unpark', '--topic', 'orders', '--key', 'ghost'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'silent' });
  assert.equal(await cli.exited, 0, cli.output());
  assert.match(cli.output(), /behind dead letter 999999999\); 0 waiting rows are published next, without it\. Dead letter 999999999 no longer exists: the key had no dead letter to wait for\n/);
  assert.doesNotMatch(cli.output(), /stay/);
  assert.deepEqual(await parked(), []);
});
