import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { getStatus, formatStatus } from '../src/commands/status.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('status');
});
after(async () => {
  await db.drop();
});

const T = (table: string): string => `"${db.schema}".${table}`;

async function deadLetter(key: string, errorName: string, reason: string, policy: 'park' | 'skip', ago = '0 seconds'): Promise<number> {
  const { rows } = await db.pool.query<{ id: number }>(
    `INSERT INTO ${T('outbox_dead_letters')} (id, message_id, topic, key, created_at, attempts, reason, error_name, policy, dead_lettered_at)
     VALUES (nextval('${db.schema}.outbox_id_seq'), gen_random_uuid(), 'orders', $1, now(), 1, $2, $3, $4, now() - $5::interval)
     RETURNING id`,
    [key, reason, errorName, policy, ago],
  );
  const id = Number(rows[0]!.id);
  if (policy === 'park') {
    await db.pool.query(`INSERT INTO ${T('outbox_parked_keys')} (topic, key, dead_letter_id, parked_at) VALUES ('orders', $1, $2, now() - $3::interval)`, [key, id, ago]);
  }
  return id;
}

test('integration: status reports backlog, rows behind parked keys, dead letters by reason, parked keys, batches in flight', async () => {
  // Backlog: 3 rows of free keys, 4 behind parked keys (a: 3, b: 1), 2 sent.
  await db.pool.query(
    `INSERT INTO ${T('outbox')} (topic, key, created_at, sent_at) VALUES
       ('orders', 'free1', now() - interval '40 seconds', NULL), ('orders', 'free2', now(), NULL), ('orders', 'free3', now(), NULL),
       ('orders', 'a', now(), NULL), ('orders', 'a', now(), NULL), ('orders', 'a', now(), NULL), ('orders', 'b', now(), NULL),
       ('orders', 'a', now(), now()), ('orders', 'sent', now(), now())`,
  );
  const a = await deadLetter('a', 'MESSAGE_TOO_LARGE', 'record of 5000 bytes is larger than max.message.bytes', 'park', '2 hours');
  const b = await deadLetter('b', 'validation:payload_json', 'payload is not JSON', 'park', '1 hour');
  await deadLetter('c', 'MESSAGE_TOO_LARGE', 'record of 5000 bytes is larger than max.message.bytes', 'skip', '30 minutes');
  await deadLetter('d', 'MESSAGE_TOO_LARGE', 'record of 5000 bytes is larger than max.message.bytes', 'skip', '5 minutes');
  await deadLetter('e', 'MESSAGE_TOO_LARGE', 'record of 9000 bytes is larger than max.message.bytes', 'skip', '1 minute');

  const status = await getStatus({ client: db.pool as never, schema: db.schema });
  assert.equal(status.pending, 7);
  assert.ok(status.oldestPendingSeconds! >= 39, `oldest ${status.oldestPendingSeconds}`);
  assert.equal(status.pendingBehindParkedKeys, 4);
  assert.equal(status.inFlightBatches, 0);
  assert.equal(status.deadLetters.total, 5);
  assert.ok(status.deadLetters.newestSeconds! >= 59 && status.deadLetters.newestSeconds! < 120);
  assert.deepEqual(
    status.deadLetters.byReason.map((g) => [g.count, g.parked, g.errorName, g.reason]),
    [
      [3, 1, 'MESSAGE_TOO_LARGE', 'record of 5000 bytes is larger than max.message.bytes'],
      [1, 0, 'MESSAGE_TOO_LARGE', 'record of 9000 bytes is larger than max.message.bytes'],
      [1, 1, 'validation:payload_json', 'payload is not JSON'],
    ],
    'grouped by (error name, reason), most frequent first',
  );
  assert.equal(status.parkedKeys.total, 2);
  assert.deepEqual(
    status.parkedKeys.oldest.map((p) => [p.key, p.deadLetterId, p.waiting]),
    [
      ['a', a, 3],
      ['b', b, 1],
    ],
    'longest parked first, with the rows waiting behind each',
  );
  assert.ok(status.parkedKeys.oldest[0]!.parkedSeconds >= 7_199);
  assert.equal(status.unownedShards, '0-255', 'existing fields are still there');
  assert.deepEqual(status.relays, []);

  const text = formatStatus(status);
  assert.match(text, /7 pending, oldest \d+\.\d s \(4 waiting behind parked keys\), 0 batches in flight/);
  assert.match(text, /^dead letters: 5, newest \d+ s ago$/m);
  assert.match(text, /^ {2}3\s+1\s+MESSAGE_TOO_LARGE\s+record of 5000 bytes/m);
  assert.match(text, /^parked keys: 2$/m);
  assert.match(text, new RegExp(`^  orders\\s+a\\s+${a}\\s+2\\.0 h ago\\s+3$`, 'm'));
});

test('integration: a relay transaction holding claimed rows counts as a batch in flight, for that relay', async () => {
  const relayId = 'status-test-relay';
  const applicationName = `outbox-relay:${relayId}`;
  await db.pool.query(`INSERT INTO ${T('outbox_relays')} (relay_id, application_name, lease_ttl_ms) VALUES ($1, $2, 60000)`, [relayId, applicationName]);
  await db.pool.query(`INSERT INTO ${T('outbox')} (topic, key) VALUES ('orders', 'inflight')`);
  // A connection of the relay in the middle of a batch: rows claimed (locked), not yet
  // marked sent, by a statement with the relay's batch marker, as every batch statement has.
  const relayConnection = new pg.Client({ connectionString: db.databaseUrl, application_name: applicationName });
  await relayConnection.connect();
  try {
    await relayConnection.query('BEGIN');
    await relayConnection.query(`/* outbox-relay batch ${relayId} */ SELECT id FROM ${T('outbox')} WHERE key = 'inflight' AND sent_at IS NULL FOR UPDATE SKIP LOCKED`);
    const during = await getStatus({ client: db.pool as never, schema: db.schema });
    assert.equal(during.inFlightBatches, 1);
    assert.equal(during.relays.find((r) => r.relayId === relayId)?.inFlightBatches, 1);
    const cli = spawnCli(['status'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
    assert.equal(await cli.exited, 0, cli.output());
    assert.match(cli.output(), /1 batch in flight/);
    assert.match(cli.output(), new RegExp(`^${relayId}\\s+live\\s+.*\\s1$`, 'm'));
    await relayConnection.query('COMMIT');
    await waitFor('the batch to end', async () => (await getStatus({ client: db.pool as never, schema: db.schema })).inFlightBatches === 0);
  } finally {
    await relayConnection.end();
    await db.pool.query(`DELETE FROM ${T('outbox_relays')} WHERE relay_id = $1`, [relayId]);
  }
});

test('integration: outbox-relay status --json carries the new sections beside the old fields', async () => {
  const out = spawnCli(['status', '--json'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
  assert.equal(await out.exited, 0, out.output());
  const status = JSON.parse(out.output());
  for (const field of ['schema', 'pending', 'oldestPendingSeconds', 'pendingBehindParkedKeys', 'inFlightBatches', 'deadLetters', 'parkedKeys', 'relays', 'unownedShards']) {
    assert.ok(field in status, field);
  }
  assert.equal(status.deadLetters.total, 5);
  assert.equal(status.parkedKeys.total, 2);
  assert.equal(status.parkedKeys.oldest[0].key, 'a');
  assert.equal(typeof status.deadLetters.byReason[0].firstAt, 'string');
});

test('integration: status of a schema that was never migrated exits 1 with one line', async () => {
  const out = spawnCli(['status'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: 'never_migrated_status' });
  assert.equal(await out.exited, 1);
  assert.deepEqual(out.output().trim().split('\n'), ['outbox-relay: schema "never_migrated_status" has no outbox tables: run `outbox-relay migrate` first']);
});
