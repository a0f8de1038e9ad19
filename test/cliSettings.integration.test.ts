import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { testBrokers } from './helpers/kafka.js';
import { createTestSchema } from './helpers/db.js';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Bad settings must exit non-zero with one line that names the setting, and touch nothing.
const sentinel = uniqueName('sentinel');
let pool: pg.Pool;
before(async () => {
  pool = new pg.Pool({ connectionString: DATABASE_URL });
  // The injection below tries `drop table y`: give it a y to drop.
  await pool.query('CREATE TABLE IF NOT EXISTS public.y (id int)');
  await pool.query(`CREATE TABLE public.${sentinel} (id int)`);
});
after(async () => {
  await pool.query(`DROP TABLE IF EXISTS public.${sentinel}`);
  await pool.end();
});

async function schemas(): Promise<string[]> {
  const { rows } = await pool.query<{ nspname: string }>('SELECT nspname FROM pg_namespace ORDER BY 1');
  return rows.map((r) => r.nspname).filter((n) => !n.startsWith('t') && !n.includes('_')); // ignore concurrent tests' own schemas
}

async function runCli(args: string[], env: Record<string, string>): Promise<{ code: number | string; lines: string[] }> {
  const p = spawnCli(args, { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(','), ...env });
  const code = await p.exited;
  return { code, lines: p.output().trim().split('\n').filter((l) => l !== '') };
}

const cases: Array<{ name: string; args: string[]; env?: Record<string, string>; code: number; pattern: RegExp }> = [
  {
    name: 'an unreachable database',
    args: ['run'],
    env: { DATABASE_URL: 'postgres://relay:s3cret-pw@127.0.0.1:1/test' },
    code: 1,
    pattern: /^outbox-relay: cannot connect to Postgres at 127\.0\.0\.1:1\/test/,
  },
  { name: 'a malformed broker list', args: ['run', '--kafka-brokers', '127.0.0.1:9092,broker-without-port'], code: 2, pattern: /^outbox-relay: --kafka-brokers: "broker-without-port" is not host:port/ },
  { name: 'a broker port out of range', args: ['run'], env: { KAFKA_BROKERS: '127.0.0.1:99999' }, code: 2, pattern: /^outbox-relay: KAFKA_BROKERS: / },
  { name: 'an injected schema name (run)', args: ['run', '--schema', 'x"; drop table y; --'], code: 2, pattern: /^outbox-relay: --schema: .* is not a valid name/ },
  { name: 'an injected schema name (migrate)', args: ['migrate', '--schema', 'x"; drop table y; --'], code: 2, pattern: /^outbox-relay: --schema: .* is not a valid name/ },
  { name: 'an injected schema name from the environment', args: ['migrate'], env: { OUTBOX_SCHEMA: 'x"; drop table y; --' }, code: 2, pattern: /^outbox-relay: OUTBOX_SCHEMA: / },
  // Quoted by migrate, "Mb" would be a schema the README's unquoted INSERT INTO Mb.outbox never reaches.
  { name: 'an upper-case schema name (migrate)', args: ['migrate', '--schema', 'Mb'], code: 2, pattern: /^outbox-relay: --schema: "Mb" has upper-case letters: Postgres folds unquoted names to lower case.*use "mb"$/ },
  { name: 'an upper-case schema name from the environment (migrate --print)', args: ['migrate', '--print'], env: { OUTBOX_SCHEMA: 'Mb' }, code: 2, pattern: /^outbox-relay: OUTBOX_SCHEMA: "Mb" has upper-case letters/ },
  { name: 'an upper-case schema name (cleanup)', args: ['cleanup', '--schema', 'Mb'], code: 2, pattern: /^outbox-relay: --schema: "Mb" has upper-case letters/ },
  { name: 'a negative batch size', args: ['run', '--batch-size', '-5'], code: 2, pattern: /^outbox-relay: --batch-size: -5 is not a whole number from 1 to 10000$/ },
  { name: 'a batch size that is not a number', args: ['run'], env: { OUTBOX_BATCH_SIZE: '10x' }, code: 2, pattern: /^outbox-relay: OUTBOX_BATCH_SIZE: "10x" is not a whole number/ },
  { name: 'a database URL that is not a URL', args: ['run'], env: { DATABASE_URL: 'host=localhost password=hunter2' }, code: 2, pattern: /^outbox-relay: DATABASE_URL: is not a URL/ },
  { name: 'a schema that was never migrated', args: ['run', '--schema', 'never_migrated_schema'], code: 1, pattern: /^outbox-relay: schema "never_migrated_schema" has no outbox tables: run `outbox-relay migrate` first$/ },
  { name: 'an unknown flag', args: ['run', '--batchsize', '5'], code: 2, pattern: /unknown option '--batchsize'/ },
];

for (const c of cases) {
  test(`integration: ${c.name} exits ${c.code} with one clear line and touches nothing`, async () => {
    const before = await schemas();
    const { code, lines } = await runCli(c.args, c.env ?? {});
    assert.equal(code, c.code, lines.join('\n'));
    assert.equal(lines.length, 1, `one line, got:\n${lines.join('\n')}`);
    assert.match(lines[0]!, c.pattern);
    assert.doesNotMatch(lines[0]!, /s3cret-pw|hunter2/, 'never echoes a secret');
    assert.deepEqual(await schemas(), before, 'no schema created or dropped');
    const { rows } = await pool.query(`SELECT to_regclass('public.y') AS y, to_regclass('public.${sentinel}') AS s`);
    assert.ok(rows[0].y && rows[0].s, 'tables untouched');
  });
}

test('integration: migrate --print needs no database and shows the SQL with the schema filled in', async () => {
  const { code, lines } = await runCli(['migrate', '--print', '--schema', 'app_events'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
  assert.equal(code, 0);
  const text = lines.join('\n');
  assert.match(text, /CREATE TABLE "app_events"\.outbox \(/);
  assert.match(text, /INSERT INTO "app_events"\.outbox_migrations/);
  assert.doesNotMatch(text, /:"schema"/);
});

// Library errors name options (kafkaSaslUsername); the CLI names what the user set.
const namingCases: Array<{ name: string; args: string[]; env: Record<string, string>; pattern: RegExp }> = [
  { name: 'a mechanism without a user name (environment)', args: ['run'], env: { KAFKA_SASL_MECHANISM: 'scram-sha-512' }, pattern: /^outbox-relay: --kafka-sasl-username or KAFKA_SASL_USERNAME: is required with SASL mechanism scram-sha-512$/ },
  { name: 'a user name without a mechanism (environment)', args: ['run'], env: { KAFKA_SASL_USERNAME: 'bob' }, pattern: /^outbox-relay: KAFKA_SASL_USERNAME: is set but no SASL mechanism is/ },
  { name: 'a user name without a mechanism (flag)', args: ['run', '--kafka-sasl-username', 'bob'], env: {}, pattern: /^outbox-relay: --kafka-sasl-username: is set but no SASL mechanism is/ },
  { name: 'a mechanism without a password', args: ['run', '--kafka-sasl-mechanism', 'plain'], env: { KAFKA_SASL_USERNAME: 'bob' }, pattern: /^outbox-relay: KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE: is required with SASL mechanism plain/ },
  { name: 'a client certificate without its key', args: ['run', '--kafka-ssl-cert-file', '/nonexistent/cert.pem'], env: {}, pattern: /^outbox-relay: --kafka-ssl-key-file or KAFKA_SSL_KEY_FILE: a client certificate needs both/ },
  { name: 'a CA file that cannot be read', args: ['run'], env: { KAFKA_SSL_CA_FILE: '/nonexistent/ca.pem' }, pattern: /^outbox-relay: KAFKA_SSL_CA_FILE: cannot read \/nonexistent\/ca\.pem: ENOENT$/ },
];

for (const c of namingCases) {
  test(`integration: ${c.name}: the error names the flag or variable, not the library option`, async () => {
    const { code, lines } = await runCli(c.args, c.env);
    assert.equal(code, 2, lines.join('\n'));
    assert.equal(lines.length, 1, lines.join('\n'));
    assert.match(lines[0]!, c.pattern);
    assert.doesNotMatch(lines[0]!, /\bkafka[A-Z]\w*:/, 'no camelCase option name');
  });
}

test('integration: --help shows every default as the user would write it (no [object Object], no empty default)', async () => {
  for (const command of [['run'], ['migrate'], ['status'], ['cleanup'], ['purge-processed'], ['dead-letters', 'list'], ['dead-letters', 'replay']]) {
    const p = spawnCli([...command, '--help'], {});
    assert.equal(await p.exited, 0);
    const help = p.output();
    assert.doesNotMatch(help, /\[object Object\]/, `${command.join(' ')} --help`);
    assert.doesNotMatch(help.replace(/\s+/g, ' '), /default \]/, `${command.join(' ')} --help shows an empty default`);
  }
});

test('integration: dead-letters list <unknown id> exits 1 naming the id; a known id lists it with exit 0', async () => {
  const t = await createTestSchema('cli_dl');
  try {
    await t.pool.query(
      `INSERT INTO "${t.schema}".outbox_dead_letters (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy)
       VALUES (7, gen_random_uuid(), 'orders', 'k1', '{}', now(), 1, 'too large', 'MESSAGE_TOO_LARGE', 'skip')`,
    );
    const unknown = await runCli(['dead-letters', 'list', '99'], { OUTBOX_SCHEMA: t.schema });
    assert.equal(unknown.code, 1, unknown.lines.join('\n'));
    assert.deepEqual(unknown.lines, ['outbox-relay: dead letter 99 does not exist; nothing was listed']);
    const mixed = await runCli(['dead-letters', 'list', '7', '98', '--json'], { OUTBOX_SCHEMA: t.schema });
    assert.equal(mixed.code, 1, mixed.lines.join('\n'));
    assert.equal(mixed.lines.length, 1);
    assert.match(mixed.lines[0]!, /dead letter 98 does not exist/);
    const known = await runCli(['dead-letters', 'list', '7', '--json'], { OUTBOX_SCHEMA: t.schema });
    assert.equal(known.code, 0, known.lines.join('\n'));
    assert.equal(JSON.parse(known.lines.join('\n')).deadLetters[0].id, 7);
    const nothing = await runCli(['dead-letters', 'list', '--topic', 'nope'], { OUTBOX_SCHEMA: t.schema });
    assert.equal(nothing.code, 0, 'a filter that matches nothing is an empty list');
    assert.deepEqual(nothing.lines, ['no dead letters match']);
    const { rows } = await t.pool.query(`SELECT count(*)::int AS n FROM "${t.schema}".outbox_dead_letters`);
    assert.equal(rows[0].n, 1, 'list changed nothing');
  } finally {
    await t.drop();
  }
});

// Every setting README's tables and docs/outboxes.md list, with a value it must refuse:
// the command exits 2 with one line naming what the user set (the flag, or the variable).
// The list is pinned to the settings themselves: a new setting without a case fails here.
// (The Debezium settings have their own table: test/unit/debeziumOptions.test.ts.)
test('integration: every setting refuses a bad value from its flag and from its variable: exit 2, one line naming it', async () => {
  const { RUN_SETTINGS } = await import('../src/commands/run.js');
  const { maxDatabaseConnections, outboxesFile } = await import('../src/relay/relayGroup.js');
  const ops = await import('../src/commands/options.js');
  const purge = await import('../src/commands/purgeProcessed.js');
  const dir = mkdtempSync(join(tmpdir(), 'cli-settings-'));
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=outbox-test'], { stdio: 'ignore' });
  const brokers = testBrokers().join(',');
  // env: the setting's variable; value: one it must refuse; command: where it is read; extra: what the probe needs beside it.
  const probes: Array<{ env: string; value: string; command: string[]; extra?: Record<string, string>; pattern?: RegExp }> = [
    { env: 'DATABASE_URL', value: 'mysql://u@h/db', command: ['run'], pattern: /scheme "mysql:"/ },
    { env: 'KAFKA_BROKERS', value: 'broker-without-port', command: ['run'], pattern: /is not host:port/ },
    { env: 'OUTBOX_SCHEMA', value: 'Orders', command: ['run'], pattern: /has upper-case letters/ },
    { env: 'OUTBOX_BATCH_SIZE', value: '10001', command: ['run'], pattern: /from 1 to 10000/ },
    { env: 'OUTBOX_BATCHES_IN_FLIGHT', value: '65', command: ['run'], pattern: /from 1 to 64/ },
    { env: 'OUTBOX_POLL_INTERVAL_MS', value: '0', command: ['run'] },
    { env: 'OUTBOX_SHUTDOWN_TIMEOUT_MS', value: '-1', command: ['run'] },
    { env: 'OUTBOX_RETRY_MAX_DELAY_MS', value: '5', command: ['run'] },
    { env: 'OUTBOX_HORIZON_MAX_WAIT_MS', value: '1.5', command: ['run'] },
    { env: 'OUTBOX_IDLE_POLL_MAX_MS', value: '0', command: ['run'] },
    { env: 'OUTBOX_LEASE_TTL_MS', value: '100', command: ['run'] },
    { env: 'OUTBOX_MAX_MESSAGE_BYTES', value: '10', command: ['run'] },
    { env: 'OUTBOX_MISSING_TOPIC_TIMEOUT_MS', value: 'soon', command: ['run'] },
    { env: 'OUTBOX_DEAD_LETTER_POLICY', value: 'drop', command: ['run'], pattern: /is not one of park, skip/ },
    { env: 'OUTBOX_DEAD_LETTER_POLICY_TOPICS', value: 'audit=maybe', command: ['run'] },
    { env: 'OUTBOX_ON_PUBLISH', value: 'keep', command: ['run'] },
    { env: 'OUTBOX_BREAKER_FAILURES', value: '0', command: ['run'] },
    { env: 'OUTBOX_POOLER', value: 'pgbouncer', command: ['run'] },
    { env: 'OUTBOX_PARTITION_MAINTENANCE_INTERVAL_MS', value: '-1', command: ['run'] },
    { env: 'OUTBOX_PARTITIONS_AHEAD', value: '0', command: ['run'] },
    { env: 'OUTBOX_PARTITION_RETENTION', value: 'forever', command: ['run'] },
    { env: 'OUTBOX_CLIENT_ID', value: 'has space', command: ['run'] },
    { env: 'OUTBOX_COMPRESSION', value: 'zstd', command: ['run'], pattern: /is not one of none, gzip/ },
    { env: 'OUTBOX_PRODUCER', value: 'rdkafka', command: ['run'] },
    { env: 'OUTBOX_DELIVERY', value: 'exactly_once', command: ['run'], pattern: /is not one of at-least-once, exactly-once/ },
    { env: 'OUTBOX_TRANSACTIONAL_ID_PREFIX', value: 'has space', command: ['run'] },
    { env: 'OUTBOX_TRANSACTION_TIMEOUT_MS', value: '10', command: ['run'] },
    { env: 'OUTBOX_TRANSACTION_INTERVAL_MS', value: '-5', command: ['run'] },
    { env: 'OUTBOX_EXACTLY_ONCE_UNITS', value: '65', command: ['run'], pattern: /from 1 to 64/ },
    { env: 'OUTBOX_ENCODINGS_FILE', value: '/nonexistent/encodings.json', command: ['run'], pattern: /cannot read \/nonexistent\/encodings.json/ },
    { env: 'KAFKA_SSL', value: 'maybe', command: ['run'], pattern: /is not true or false/ },
    { env: 'KAFKA_SSL_CA_FILE', value: '/nonexistent/ca.pem', command: ['run'], pattern: /cannot read/ },
    { env: 'KAFKA_SSL_CERT_FILE', value: key, command: ['run'], extra: { KAFKA_SSL_KEY_FILE: key }, pattern: /holds no PEM certificate/ },
    { env: 'KAFKA_SSL_KEY_FILE', value: cert, command: ['run'], extra: { KAFKA_SSL_CERT_FILE: cert }, pattern: /holds no PEM private key/ },
    { env: 'KAFKA_SASL_MECHANISM', value: 'gssapi', command: ['run'] },
    { env: 'KAFKA_SASL_USERNAME', value: 'x'.repeat(4097), command: ['run'], pattern: /longer than 4096/ },
    { env: 'KAFKA_SASL_PASSWORD', value: 'pw-without-mechanism', command: ['run'], pattern: /is set but no SASL mechanism is/ },
    { env: 'OUTBOX_METRICS_ADDRESS', value: 'everywhere', command: ['run'] },
    { env: 'OUTBOX_METRICS_SAMPLE_INTERVAL_MS', value: '50', command: ['run'] },
    { env: 'OUTBOX_LOG_LEVEL', value: 'loud', command: ['run'] },
    { env: 'OUTBOX_OUTBOXES_FILE', value: '/nonexistent/outboxes.json', command: ['run'], extra: { DATABASE_URL: '' }, pattern: /cannot read/ },
    { env: 'OUTBOX_MAX_DATABASE_CONNECTIONS', value: '-1', command: ['run'] },
    { env: 'OUTBOX_CLEANUP_RETENTION', value: '7 days', command: ['cleanup'] },
    { env: 'OUTBOX_CLEANUP_BATCH_SIZE', value: '0', command: ['cleanup'] },
    { env: 'OUTBOX_PROCESSED_RETENTION', value: '1h', command: ['purge-processed'] },
    { env: 'OUTBOX_PROCESSED_RETENTION_DAYS', value: '0', command: ['purge-processed'] },
    { env: 'OUTBOX_PURGE_BATCH_SIZE', value: '100001', command: ['purge-processed'] },
    { env: 'OUTBOX_DEAD_LETTERS_LIMIT', value: '0', command: ['dead-letters', 'list'] },
    { env: 'OUTBOX_REPLAY_RATE', value: '0', command: ['dead-letters', 'replay', '--all'] },
    { env: 'OUTBOX_REPLAY_WAIT_TIMEOUT', value: '0s', command: ['dead-letters', 'replay', '--all', '--wait'], pattern: /is not a duration from 1s to 1d/ },
  ];
  const all = [...RUN_SETTINGS, outboxesFile, maxDatabaseConnections, ops.cleanupRetention, ops.cleanupBatchSize, purge.purgeRetention, purge.purgeRetentionDays, purge.purgeBatchSize, ops.listLimit, ops.replayRate, ops.replayWaitTimeout];
  assert.deepEqual(probes.map((p) => p.env).sort(), all.map((s) => s.env).sort(), 'one probe per setting');
  const runs: Array<() => Promise<void>> = [];
  for (const probe of probes) {
    const setting = all.find((s) => s.env === probe.env)!;
    const forms: Array<[string, string[], Record<string, string>]> = [[probe.env, [], { [probe.env]: probe.value }]];
    if (setting.flag) forms.push([setting.flag, [setting.flag, probe.value], {}]);
    for (const [name, args, env] of forms) {
      runs.push(async () => {
        const p = spawnCli([...probe.command, ...args], { DATABASE_URL, KAFKA_BROKERS: brokers, ...probe.extra, ...env });
        const code = await p.exited;
        const lines = p.output().trim().split('\n');
        const where = `${probe.command.join(' ')} ${name}=${probe.value.slice(0, 40)}`;
        assert.equal(code, 2, `${where}: ${p.output()}`);
        assert.equal(lines.length, 1, `${where}: one line: ${p.output()}`);
        assert.ok(lines[0]!.startsWith(`outbox-relay: ${name}: `), `${where} names ${name}: ${lines[0]}`);
        if (probe.pattern) assert.match(lines[0]!, probe.pattern, where);
      });
    }
  }
  // A few at a time: the machine is shared.
  for (let i = 0; i < runs.length; i += 4) await Promise.all(runs.slice(i, i + 4).map((r) => r()));
});

test('integration: secrets have no flag: --database-url and --kafka-sasl-password are unknown options (exit 2)', async () => {
  for (const flag of ['--database-url', '--kafka-sasl-password']) {
    const { code, lines } = await runCli(['run', flag, 'postgres://u:pw-on-argv@h/db'], {});
    assert.equal(code, 2, lines.join('\n'));
    assert.deepEqual(lines, [`outbox-relay: unknown option '${flag}'`]);
  }
});
