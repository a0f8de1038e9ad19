import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { migrate } from '../src/commands/migrate.js';
import { createTopic } from './helpers/kafka.js';
import { outboxesCli } from './helpers/outboxesCli.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER_ENV } from './helpers/producer.js';

// `outbox-relay` with a list of outboxes: `run` relays each, the operator commands act on
// the one --outbox names (migrate and status on each when none is named).

const { SECRET, schemas, admin, file, env, cli } = outboxesCli();

test('integration: migrate, run and status over an outboxes file; operator commands take --outbox; the password never shows', async () => {
  const migrated = await cli(['migrate', '--outboxes-file', file]);
  assert.equal(migrated.code, 0, migrated.output);
  assert.match(migrated.output, /outbox one: applied 001_outbox/);
  assert.match(migrated.output, /outbox two: applied 001_outbox/);

  const [t1, t2] = [await createTopic(2), await createTopic(2)];
  await admin.query(`INSERT INTO "${schemas[0]}".outbox (topic, key, payload) SELECT $1, 'k' || (i % 5), '{}' FROM generate_series(1, 40) i`, [t1]);
  await admin.query(`INSERT INTO "${schemas[1]}".outbox (topic, key, payload) SELECT $1, 'k' || (i % 5), '{}' FROM generate_series(1, 30) i`, [t2]);

  const relay = spawnCli(['run', '--log-level', 'debug'], { ...env(), ...TEST_PRODUCER_ENV, OUTBOX_OUTBOXES_FILE: file });
  try {
    const sent = async (schema: string) => (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox WHERE sent_at IS NOT NULL`)).rows[0]!.n;
    await waitFor('both outboxes relayed', async () => (await sent(schemas[0]!)) === 40 && (await sent(schemas[1]!)) === 30);
    const address = await waitFor('the metrics address', async () => /"address":"(http:\/\/[^"]+)"/.exec(relay.output())?.[1]);
    const ready = await waitFor('/readyz 200', async () => {
      const r = await fetch(`${address}/readyz`);
      return r.status === 200 ? ((await r.json()) as { checks: Record<string, { ok: boolean }> }) : undefined;
    });
    assert.ok(ready.checks['one.claim']?.ok && ready.checks['two.claim']?.ok, JSON.stringify(ready));
    const metrics = await (await fetch(`${address}/metrics`)).text();
    assert.match(metrics, /^outbox_relay_outbox_up\{outbox="one"\} 1$/m);
    assert.match(metrics, /^outbox_relay_published_rows_total\{topic="[^"]+",outbox="two"\} 30$/m);

    const status = await cli(['status', '--outboxes-file', file]);
    assert.equal(status.code, 0, status.output);
    assert.match(status.output, /== outbox one/);
    assert.match(status.output, /== outbox two/);
    const one = await cli(['status', '--json', '--outboxes-file', file, '--outbox', 'two']);
    assert.equal(one.code, 0, one.output);
    assert.equal((JSON.parse(one.output) as { schema: string }).schema, schemas[1]);

    const listed = await cli(['dead-letters', 'list', '--outboxes-file', file, '--outbox', 'one']);
    assert.equal(listed.code, 0, listed.output);
    for (const out of [migrated.output, status.output, listed.output]) assert.ok(!out.includes(SECRET));
  } finally {
    relay.child.kill('SIGTERM');
    assert.equal(await relay.exited, 0, relay.output());
  }
  assert.ok(!relay.output().includes(SECRET), 'no password in the relay output, even at debug level');
  assert.match(relay.output(), /"outbox":"one"/);
});

test('integration: debezium print, attach and detach from the CLI, on the outbox --outbox names', async () => {
  await migrate({ databaseUrl: DATABASE_URL, schema: schemas[1]! }); // a no-op after the first test
  const table = `${schemas[1]}.outboxevent`;
  await admin.query(`CREATE TABLE "${schemas[1]}".outboxevent (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb)`);
  const args = ['--outboxes-file', file, '--outbox', 'two', '--table', table, '--topic-pattern', 'cli.${routedByValue}'];
  const printed = await cli(['debezium', 'print', ...args]);
  assert.equal(printed.code, 0, printed.output);
  assert.match(printed.output, /CREATE TRIGGER/);
  const count = async () => (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_trigger WHERE tgrelid = $1::regclass`, [`"${schemas[1]}".outboxevent`])).rows[0]!.n;
  assert.equal(await count(), 0, 'print changes nothing');
  const attached = await cli(['debezium', 'attach', ...args]);
  assert.equal(attached.code, 0, attached.output);
  assert.match(attached.output, /^attached outbox_relay_debezium on /m);
  await admin.query(`INSERT INTO "${schemas[1]}".outboxevent VALUES (gen_random_uuid(), 'order', 'o-1', 'Created', '{"a":1}')`);
  const { rows } = await admin.query<{ topic: string; key: string }>(`SELECT topic, key FROM "${schemas[1]}".outbox WHERE topic = 'cli.order'`);
  assert.deepEqual(rows, [{ topic: 'cli.order', key: 'o-1' }]);
  const bad = await cli(['debezium', 'attach', ...args.slice(0, 4), '--table', `${schemas[1]}.missing_table`]);
  assert.equal(bad.code, 2, bad.output);
  const detached = await cli(['debezium', 'detach', '--outboxes-file', file, '--outbox', 'two', '--table', table]);
  assert.equal(detached.code, 0, detached.output);
  assert.equal(await count(), 0);
});

test('integration: status over a list shows every outbox it can read, reports the one it cannot, and exits 1', async () => {
  await migrate({ databaseUrl: DATABASE_URL, schema: schemas[0]! });
  const partial = join(mkdtempSync(join(tmpdir(), 'outboxes-')), 'outboxes.json');
  writeFileSync(partial, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }, { name: 'gone', databaseUrlEnv: 'TWO_URL', schema: uniqueName('never_migrated') }] }));
  const r = await cli(['status', '--outboxes-file', partial]);
  assert.equal(r.code, 1, r.output);
  assert.match(r.output, /== outbox one[^\n]*\n[\s\S]*pending/i);
  assert.match(r.output, /== outbox gone[^\n]*\nunavailable: .*migrat/i);
  const json = await cli(['status', '--json', '--outboxes-file', partial]);
  assert.equal(json.code, 1, json.output);
  const parsed = JSON.parse(json.output) as Array<{ outbox: string; status?: unknown; error?: string }>;
  assert.deepEqual(parsed.map((o) => [o.outbox, o.status !== undefined, o.error !== undefined]), [['one', true, false], ['gone', false, true]]);
  assert.ok(!r.output.includes(SECRET) && !json.output.includes(SECRET));
});
