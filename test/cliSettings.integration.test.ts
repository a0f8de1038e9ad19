import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { createTestSchema } from './helpers/db.js';
import { waitFor } from './helpers/wait.js';

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

test('integration: SIGHUP stops the relay cleanly like SIGTERM: exit 0, logged, leases released at once, rows sent', async () => {
  const t = await createTestSchema('cli_hup');
  const topic = await createTopic(2);
  try {
    await t.pool.query(`INSERT INTO "${t.schema}".outbox (topic, key, payload) SELECT $1, 'k' || g, '{}' FROM generate_series(1, 20) g`, [topic]);
    const relay = spawnCli(['run'], { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: t.schema, OUTBOX_LEASE_TTL_MS: '60000' });
    await waitFor('rows sent and shards owned', async () => {
      const { rows } = await t.pool.query(
        `SELECT (SELECT count(*) FROM "${t.schema}".outbox WHERE sent_at IS NULL)::int AS unsent,
                (SELECT count(*) FROM "${t.schema}".outbox_shard_leases WHERE owner IS NOT NULL)::int AS owned`,
      );
      return rows[0].unsent === 0 && rows[0].owned > 0;
    }, { timeoutMs: 60_000 });
    relay.child.kill('SIGHUP');
    assert.equal(await relay.exited, 0, relay.output());
    assert.match(relay.output(), /"signal":"SIGHUP"/, 'the signal is logged');
    // Released on the way out, not left to expire (the TTL is a minute).
    const { rows } = await t.pool.query(
      `SELECT (SELECT count(*) FROM "${t.schema}".outbox_shard_leases WHERE owner IS NOT NULL AND expires_at > now())::int AS held,
              (SELECT count(*) FROM "${t.schema}".outbox_relays)::int AS members,
              (SELECT count(*) FROM "${t.schema}".outbox WHERE sent_at IS NULL)::int AS unsent`,
    );
    assert.deepEqual(rows[0], { held: 0, members: 0, unsent: 0 });
  } finally {
    await t.drop();
  }
});
