import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { migrate } from '../src/commands/migrate.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER_ENV } from './helpers/producer.js';

// `outbox-relay` with a list of outboxes: `run` relays each, the operator commands act on
// the one --outbox names (migrate and status on each when none is named).

const SECRET = 'pw-never-logged-7f3a';
// Trust auth ignores the password; it is there to show it never reaches the output.
const URL_WITH_PASSWORD = (() => {
  const u = new URL(DATABASE_URL);
  u.username = u.username || 'postgres';
  u.password = SECRET;
  return u.toString();
})();
const schemas = [uniqueName('cli_one'), uniqueName('cli_two')];
let admin: pg.Pool;
let file: string;

before(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const dir = mkdtempSync(join(tmpdir(), 'outboxes-'));
  file = join(dir, 'outboxes.json');
  writeFileSync(file, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }, { name: 'two', databaseUrlEnv: 'TWO_URL', schema: schemas[1] }] }));
});

after(async () => {
  for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await admin.end();
});

const env = (extra: Record<string, string> = {}) => ({ ONE_URL: URL_WITH_PASSWORD, TWO_URL: URL_WITH_PASSWORD, KAFKA_BROKERS: testBrokers().join(','), ...extra });

async function cli(args: string[], extra: Record<string, string> = {}): Promise<{ code: number | string; output: string }> {
  const p = spawnCli(args, env(extra));
  const code = await p.exited;
  return { code, output: p.output() };
}

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

test('integration: misuse of the outbox flags exits 2 with one line and touches nothing', async () => {
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['dead-letters', 'list', '--outboxes-file', file], {}, /--outbox: is required: the list has 2 outboxes \(one, two\)/],
    [['cleanup', '--outboxes-file', file, '--outbox', 'three'], {}, /--outbox: "three" is not in the list \(one, two\)/],
    [['status', '--outbox', 'one'], { DATABASE_URL }, /--outbox: needs a list of outboxes/],
    [['run', '--outboxes-file', file], { DATABASE_URL }, /DATABASE_URL: and a list of outboxes are both set/],
    [['run', '--outboxes-file', file, '--schema', 'x'], {}, /--schema: is per outbox/],
    [['run', '--outboxes-file', '/nonexistent/outboxes.json'], {}, /cannot read \/nonexistent\/outboxes.json/],
    [['run', '--outboxes-file', file, '--max-database-connections', '5'], {}, /need up to 18 connections/],
    [['run'], { OUTBOX_OUTBOXES: 'one', OUTBOX_ONE_DATABASE_URL: 'postgres://u:pw-x@h:5432/d@x' }, /outbox one: database URL: has an '@' after the host/],
  ];
  for (const [args, extra, pattern] of cases) {
    const r = await cli(args, extra);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
    assert.match(r.output, pattern, args.join(' '));
    assert.equal(r.output.trim().split('\n').length, 1, `one line: ${r.output}`);
    assert.ok(!r.output.includes('pw-x') && !r.output.includes(SECRET), r.output);
  }
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

/** Every command and subcommand path of the CLI, read from its help (so a new command cannot be left out of a test). */
async function commandPaths(prefix: string[] = []): Promise<string[][]> {
  const p = spawnCli([...prefix, '--help'], {});
  assert.equal(await p.exited, 0, p.output());
  const names = (p.output().split(/^Commands:$/m)[1] ?? '')
    .split('\n')
    .map((l) => /^ {2}([a-z-]+)/.exec(l)?.[1])
    .filter((n): n is string => n !== undefined && n !== 'help');
  const paths: string[][] = [];
  for (const name of names) {
    const sub = await commandPaths([...prefix, name]);
    paths.push(...(sub.length ? sub : [[...prefix, name]]));
  }
  return paths;
}

test('integration: --schema and OUTBOX_SCHEMA beside a list are refused by every command (exit 2, one line), and nothing is touched', async () => {
  await migrate({ databaseUrl: DATABASE_URL, schema: schemas[0]! });
  const one = join(mkdtempSync(join(tmpdir(), 'outboxes-')), 'one.json');
  writeFileSync(one, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }] }));
  // A sent row well past cleanup's retention: `cleanup --schema mb` once deleted it.
  const { rows: inserted } = await admin.query<{ id: number }>(
    `INSERT INTO "${schemas[0]}".outbox (topic, key, payload, sent_at) VALUES ('t', 'k', '{}', now() - interval '30 days') RETURNING id`,
  );
  const extraArgs: Record<string, string[]> = {
    'dead-letters replay': ['--all'],
    'dead-letters discard': ['--all', '--yes'],
    'debezium attach': ['--table', `${schemas[0]}.outboxevent`],
    'debezium print': ['--table', `${schemas[0]}.outboxevent`],
    'debezium detach': ['--table', `${schemas[0]}.outboxevent`],
  };
  const paths = await commandPaths();
  assert.deepEqual(
    paths.map((p) => p.join(' ')).sort(),
    ['cleanup', 'dead-letters discard', 'dead-letters list', 'dead-letters replay', 'debezium attach', 'debezium detach', 'debezium print', 'maintain-partitions', 'migrate', 'partition-outbox', 'purge-processed', 'run', 'status'],
  );
  const runs: Array<Promise<void>> = [];
  for (const path of [...paths, ['migrate', '--print']]) {
    const args = [...path, ...(extraArgs[path.join(' ')] ?? []), '--outboxes-file', one];
    for (const [how, extra, setting] of [
      [['--schema', 'mb'], {}, '--schema'],
      [[], { OUTBOX_SCHEMA: 'mb' }, 'OUTBOX_SCHEMA'],
    ] as const) {
      runs.push(
        cli([...args, ...how], extra).then((r) => {
          assert.equal(r.code, 2, `${args.join(' ')} ${setting}: ${r.output}`);
          assert.match(r.output, new RegExp(`^outbox-relay: ${setting}: is per outbox with a list of outboxes`), `${args.join(' ')}: ${r.output}`);
          assert.equal(r.output.trim().split('\n').length, 1, r.output);
        }),
      );
    }
  }
  await Promise.all(runs);
  const { rows } = await admin.query(`SELECT id FROM "${schemas[0]}".outbox WHERE id = $1`, [inserted[0]!.id]);
  assert.equal(rows.length, 1, 'cleanup deleted nothing');
  const schemasNamedMb = await admin.query(`SELECT 1 FROM pg_namespace WHERE nspname = 'mb'`);
  assert.equal(schemasNamedMb.rowCount, 0, 'no schema mb created');
  // Without --schema the same list works: the refusal is about the pair, not the list.
  const fine = await cli(['cleanup', '--outboxes-file', one]);
  assert.equal(fine.code, 0, fine.output);
  assert.match(fine.output, /deleted 1 sent rows/);
});

test('integration: typos in a list are refused with one line naming them: a top-level key of the file, an OUTBOX_<NAME>_* variable, an upper-case schema', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'outboxes-'));
  const withKey = join(dir, 'with-key.json');
  writeFileSync(withKey, JSON.stringify({ kafkaBrokers: '127.0.0.1:1', outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }] }));
  const upper = join(dir, 'upper.json');
  writeFileSync(upper, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: 'Tenant_A' }] }));
  const envList = { OUTBOX_OUTBOXES: 'one', OUTBOX_ONE_DATABASE_URL: URL_WITH_PASSWORD };
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['run', '--outboxes-file', withKey], {}, /^outbox-relay: .*with-key\.json: has unknown top-level key "kafkaBrokers"/],
    [['status', '--outboxes-file', withKey], {}, /has unknown top-level key "kafkaBrokers"/],
    [['run'], { ...envList, OUTBOX_ONE_SHEMA: schemas[0]! }, /^outbox-relay: OUTBOX_ONE_SHEMA: is not a variable of outbox one \(known: .*OUTBOX_ONE_SCHEMA/],
    [['migrate'], { ...envList, OUTBOX_ONE_SHEMA: schemas[0]! }, /^outbox-relay: OUTBOX_ONE_SHEMA: is not a variable of outbox one/],
    [['migrate', '--outboxes-file', upper], {}, /^outbox-relay: outbox one: schema: "Tenant_A" has upper-case letters/],
    [['migrate'], { ...envList, OUTBOX_ONE_SCHEMA: 'Tenant_A' }, /^outbox-relay: OUTBOX_ONE_SCHEMA: "Tenant_A" has upper-case letters/],
    [['run'], { DATABASE_URL_FILE: '/nonexistent/url', OUTBOX_OUTBOXES_FILE: file }, /^outbox-relay: DATABASE_URL_FILE: and a list of outboxes are both set/],
  ];
  for (const [args, extra, pattern] of cases) {
    const r = await cli(args, extra);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
    assert.match(r.output, pattern, `${args.join(' ')} ${JSON.stringify(extra)}`);
    assert.equal(r.output.trim().split('\n').length, 1, `one line: ${r.output}`);
    assert.ok(!r.output.includes(SECRET), r.output);
  }
  // A variable of another setting that shares an outbox's prefix is not taken for a typo:
  // an outbox named `batch` beside OUTBOX_BATCH_SIZE (--batch-size).
  const shared = await cli(['migrate', '--print'], { OUTBOX_OUTBOXES: 'batch', OUTBOX_BATCH_DATABASE_URL: URL_WITH_PASSWORD, OUTBOX_BATCH_SCHEMA: schemas[0]!, OUTBOX_BATCH_SIZE: '100' });
  assert.equal(shared.code, 0, shared.output);
  assert.match(shared.output, /^-- outbox batch$/m);
});
