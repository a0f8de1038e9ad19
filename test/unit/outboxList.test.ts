import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../src/shared/errors.js';
import { outboxesFromEnvironment, parseOutboxesFile, readOutboxList } from '../../src/shared/outboxList.js';

const URL_A = 'postgres://relay:pw-a@db-a:5432/app';
const URL_B = 'postgres://relay@db-b:5432/app';

function refuses(run: () => unknown, pattern: RegExp, secret?: string): void {
  assert.throws(run, (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    assert.match(e.message, pattern);
    if (secret) assert.ok(!e.message.includes(secret), `no secret in: ${e.message}`);
    return true;
  });
}

test('an outboxes file takes each URL from the variable or file it names, and the schema per outbox', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outboxes-'));
  const secret = join(dir, 'b-url');
  writeFileSync(secret, `${URL_B}\n`);
  const list = parseOutboxesFile(
    JSON.stringify({
      outboxes: [
        { name: 'orders', databaseUrlEnv: 'ORDERS_URL', schema: 'orders' },
        { name: 'tenant_b', databaseUrlFile: secret, batchesInFlight: 1, delivery: 'exactly-once' },
        { name: 'plain', databaseUrl: 'postgres://relay@db-c/app' },
      ],
    }),
    'outboxes.json',
    { ORDERS_URL: URL_A },
  );
  assert.deepEqual(list, [
    { name: 'orders', databaseUrl: URL_A, schema: 'orders' },
    { name: 'tenant_b', databaseUrl: URL_B, schema: 'public', batchesInFlight: 1, delivery: 'exactly-once' },
    { name: 'plain', databaseUrl: 'postgres://relay@db-c/app', schema: 'public' },
  ]);
});

test('an outboxes file is refused, naming the entry, never quoting a URL', () => {
  const parse = (doc: unknown, env: NodeJS.ProcessEnv = { U: URL_A }) => () => parseOutboxesFile(JSON.stringify(doc), 'f.json', env);
  refuses(() => parseOutboxesFile('{', 'f.json', {}), /f\.json: is not JSON/);
  refuses(parse({}), /needs an "outboxes" list/);
  refuses(parse({ outboxes: [] }), /at least one outbox/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrl: URL_A }] }), /holds a password: put the URL in an environment variable/, 'pw-a');
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'MISSING' }] }), /outboxes\[0\]\.databaseUrlEnv: names MISSING, which is not set/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U', databaseUrlFile: '/x' }] }), /exactly one of/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U', tables: 1 }] }), /unknown field tables/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlFile: '/nonexistent/url' }] }), /cannot read \/nonexistent\/url: ENOENT/);
  refuses(parse({ outboxes: [{ name: 'A', databaseUrlEnv: 'U' }] }), /not an outbox name/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U' }, { name: 'b', databaseUrlEnv: 'U' }] }), /same database and schema as outbox a/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U', schema: 'x;drop' }] }), /not a valid name/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U', batchesInFlight: 0 }] }), /batchesInFlight/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U', delivery: 'exactly_once' }] }), /outbox a: delivery: "exactly_once" is not at-least-once or exactly-once/);
  refuses(parse({ outboxes: [{ name: 'a', databaseUrlEnv: 'U' }] }, { U: 'postgres://u:pw/x@host:5432/db' }), /database URL/, 'pw/x');
});

test('OUTBOX_OUTBOXES names the outboxes; each takes OUTBOX_<NAME>_DATABASE_URL (or _FILE), _SCHEMA, _BATCHES_IN_FLIGHT and _DELIVERY', () => {
  const list = outboxesFromEnvironment({
    OUTBOX_OUTBOXES: 'orders, billing',
    OUTBOX_ORDERS_DATABASE_URL: URL_A,
    OUTBOX_ORDERS_SCHEMA: 'orders',
    OUTBOX_BILLING_DATABASE_URL: URL_B,
    OUTBOX_BILLING_BATCHES_IN_FLIGHT: '4',
    OUTBOX_BILLING_DELIVERY: 'exactly-once',
  });
  assert.deepEqual(list, [
    { name: 'orders', databaseUrl: URL_A, schema: 'orders' },
    { name: 'billing', databaseUrl: URL_B, schema: 'public', batchesInFlight: 4, delivery: 'exactly-once' },
  ]);
  refuses(() => outboxesFromEnvironment({ OUTBOX_OUTBOXES: 'orders', OUTBOX_ORDERS_DATABASE_URL: URL_A, OUTBOX_ORDERS_DELIVERY: 'once' }), /OUTBOX_ORDERS_DELIVERY: "once" is not/);
  refuses(() => outboxesFromEnvironment({ OUTBOX_OUTBOXES: 'orders' }), /OUTBOX_ORDERS_DATABASE_URL: is required/);
  refuses(() => outboxesFromEnvironment({ OUTBOX_OUTBOXES: 'orders', OUTBOX_ORDERS_DATABASE_URL: URL_A, OUTBOX_ORDERS_DATABASE_URL_FILE: '/x' }), /both set/);
  refuses(() => outboxesFromEnvironment({ OUTBOX_OUTBOXES: 'Orders' }), /not an outbox name/);
  refuses(() => outboxesFromEnvironment({ OUTBOX_OUTBOXES: 'orders', OUTBOX_ORDERS_DATABASE_URL: URL_A, OUTBOX_ORDERS_BATCHES_IN_FLIGHT: 'many' }), /BATCHES_IN_FLIGHT/);
});

test('readOutboxList: nothing set is one outbox (undefined); a file and OUTBOX_OUTBOXES together are refused', () => {
  assert.equal(readOutboxList(undefined, {}), undefined);
  refuses(() => readOutboxList('/some/file.json', { OUTBOX_OUTBOXES: 'a' }), /both set/);
  refuses(() => readOutboxList(undefined, { OUTBOX_OUTBOXES_FILE: '/nonexistent.json' }), /OUTBOX_OUTBOXES_FILE: cannot read/);
});

test('an outboxes file refuses an unknown top-level key beside "outboxes" instead of ignoring it', () => {
  const entries = [{ name: 'a', databaseUrlEnv: 'U' }];
  for (const key of ['outbox', 'kafkaBrokers', 'schema']) {
    refuses(() => parseOutboxesFile(JSON.stringify({ outboxes: entries, [key]: 'x' }), 'f.json', { U: URL_A }), new RegExp(`^f\\.json: has unknown top-level key "${key}"`));
  }
  refuses(() => parseOutboxesFile('[]', 'f.json', {}), /f\.json: is not a JSON object/);
  refuses(() => parseOutboxesFile(JSON.stringify({ outbox: entries }), 'f.json', { U: URL_A }), /unknown top-level key "outbox"/);
});

test('an outboxes file that is not JSON is refused without quoting any of its text (it may be a secret file named by mistake)', () => {
  for (const text of ['Passw0rd-hunter2-secret\n', '{"outboxes": [Passw0rd-hunter2-secret]}', '{\n  "outboxes": [],\n  Passw0rd-hunter2-secret\n}', '']) {
    refuses(() => parseOutboxesFile(text, 'f.json', {}), /^f\.json: is not JSON \(.*the content is not shown\)$/, 'hunter2');
  }
  refuses(() => parseOutboxesFile('{"a":1,}', 'f.json', {}), /syntax error at line 1, column 8/);
});

test('OUTBOX_<NAME>_* refuses a variable the outbox does not have (OUTBOX_ORDERS_SHEMA), naming it; other settings sharing the prefix pass', () => {
  const base = { OUTBOX_OUTBOXES: 'orders,batch', OUTBOX_ORDERS_DATABASE_URL: URL_A, OUTBOX_BATCH_DATABASE_URL: URL_B };
  refuses(() => outboxesFromEnvironment({ ...base, OUTBOX_ORDERS_SHEMA: 'orders' }), /^OUTBOX_ORDERS_SHEMA: is not a variable of outbox orders \(known: OUTBOX_ORDERS_DATABASE_URL, .*OUTBOX_ORDERS_SCHEMA/);
  refuses(() => outboxesFromEnvironment({ ...base, OUTBOX_BATCH_BATCHES_INFLIGHT: '2' }), /^OUTBOX_BATCH_BATCHES_INFLIGHT: is not a variable of outbox batch/);
  refuses(() => readOutboxList(undefined, { ...base, OUTBOX_ORDERS_SHEMA: 'orders' }), /OUTBOX_ORDERS_SHEMA/);
  // OUTBOX_BATCH_SIZE is --batch-size, not a variable of the outbox named batch.
  const list = outboxesFromEnvironment({ ...base, OUTBOX_BATCH_SIZE: '100' }, new Set(['OUTBOX_BATCH_SIZE']));
  assert.deepEqual(list.map((o) => o.name), ['orders', 'batch']);
  // Kubernetes puts a Service's links into every pod: a Service outbox-orders is no typo.
  const links = { OUTBOX_ORDERS_SERVICE_HOST: '10.0.0.1', OUTBOX_ORDERS_SERVICE_PORT: '9464', OUTBOX_ORDERS_SERVICE_PORT_METRICS: '9464', OUTBOX_ORDERS_PORT: 'tcp://10.0.0.1:9464', OUTBOX_ORDERS_PORT_9464_TCP_ADDR: '10.0.0.1' };
  assert.equal(outboxesFromEnvironment({ ...base, ...links }).length, 2);
  refuses(() => outboxesFromEnvironment({ ...base, OUTBOX_ORDERS_BATCHES_IN_FLIGHT: '0' }), /^OUTBOX_ORDERS_BATCHES_IN_FLIGHT: "0" is not a whole number from 1 to 64/);
});

test('an upper-case schema is refused in both forms: Postgres folds the unquoted name writers use', () => {
  refuses(() => parseOutboxesFile(JSON.stringify({ outboxes: [{ name: 'a', databaseUrlEnv: 'U', schema: 'Tenant_A' }] }), 'f.json', { U: URL_A }), /outbox a: schema: "Tenant_A" has upper-case letters.*use "tenant_a"/);
  refuses(() => outboxesFromEnvironment({ OUTBOX_OUTBOXES: 'a', OUTBOX_A_DATABASE_URL: URL_A, OUTBOX_A_SCHEMA: 'MB' }), /^OUTBOX_A_SCHEMA: "MB" has upper-case letters/);
});
