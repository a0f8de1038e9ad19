/**
 * The hostile-input cases: bad or mistaken inputs a hostile operator would try, one entry
 * each, by class (config, schema state, odd rows, operator commands, the consumer library,
 * secrets, HTTP, signals). Each case asserts the exit code (or, for a library call, the
 * error class), a one-line message naming the setting or the row, and that nothing was
 * lost, duplicated or left half-done: the tables of the schema it ran against and its
 * topic are snapshotted before and after. The odd rows are in ./rowCases.ts.
 *
 * Cases marked `knownBug` exercise a fix another part of issue 11 is making (relay publish
 * path, consumer); they are written the way the behaviour must be, and fail until then.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { RUN_SETTINGS } from '../../src/commands/run.js';
import { ConfigError } from '../../src/shared/errors.js';
import { createTestSchema, DATABASE_URL, uniqueName } from '../helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from '../helpers/kafka.js';
import { spawnCli } from '../helpers/processes.js';
import { waitFor } from '../helpers/wait.js';
import { finish, ownSchemas, runCli, snapshotSchema, topicSize, type CliOutcome } from './support.js';
import type { CaseClass, HostileCase, World } from './caseTypes.js';
import { rowCases } from './rowCases.js';

/** A readable PEM certificate (self-signed, made once), for cases about the key file beside it. */
const readableCertificate = (() => {
  const dir = mkdtempSync(join(tmpdir(), 'hostile-tls-'));
  const cert = join(dir, 'cert.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'key.pem'), '-out', cert, '-days', '1', '-subj', '/CN=outbox-hostile'], { stdio: 'ignore' });
  return cert;
})();

export async function makeWorld(): Promise<World> {
  const base = await createTestSchema('hostile_base');
  const topic = await createTopic(2, testBrokers(), 'hostile_base');
  await base.pool.query(`INSERT INTO "${base.schema}".outbox (topic, key, payload) SELECT $1, 'k' || g, '{"n":1}' FROM generate_series(1, 5) g`, [topic]);
  await base.pool.query(
    `INSERT INTO "${base.schema}".outbox_dead_letters (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy)
     VALUES (4242, gen_random_uuid(), $1, 'dl-key', '{}', now(), 1, 'too large', 'MESSAGE_TOO_LARGE', 'skip')`,
    [topic],
  );
  return { base, topic, deadLetterId: 4242 };
}

/** The base's tables, the schemas a case's inputs name (an injection must create or drop
 *  none of them), and the base topic, for before/after. */
async function baseState(w: World, inputs: string[] = []): Promise<unknown> {
  const names = [...new Set(inputs.flatMap((v) => [v, ...v.split(/[^A-Za-z0-9_]+/)]).filter((n) => n !== '' && n.length < 64))];
  return { tables: await snapshotSchema(w.base.pool, w.base.schema), schemas: await ownSchemas(w.base.pool, names), topic: await topicSize(w.topic) };
}

function assertOneLine(o: CliOutcome, code: number, pattern: RegExp, secrets: string[] = []): void {
  assert.equal(o.code, code, `exit code; output:\n${o.output}`);
  assert.equal(o.lines.length, 1, `one line, got:\n${o.output}`);
  assert.match(o.lines[0]!, pattern);
  for (const s of secrets) assert.ok(!o.output.includes(s), `output shows the secret piece ${JSON.stringify(s)}:\n${o.output}`);
}

/** A CLI run against the base that must exit `code` with one line and change nothing. */
function cli(c: { class: CaseClass; name: string; args: string[] | ((w: World) => string[]); env?: Record<string, string>; code: number; pattern: RegExp; secrets?: string[]; knownBug?: string }): HostileCase {
  return {
    class: c.class,
    name: c.name,
    ...(c.knownBug ? { knownBug: c.knownBug } : {}),
    async run(w) {
      const args = typeof c.args === 'function' ? c.args(w) : c.args;
      const inputs = [...args, ...Object.values(c.env ?? {}), 'x', 'y', 'public'];
      const before = await baseState(w, inputs);
      const o = await runCli(args, { DATABASE_URL, OUTBOX_SCHEMA: w.base.schema, ...c.env });
      assertOneLine(o, c.code, c.pattern, c.secrets);
      assert.deepEqual(await baseState(w, inputs), before, 'the base schema, the schemas named by the inputs and the topic are unchanged');
    },
  };
}

// ---------------------------------------------------------------------------------------
// config: a bad value for every setting of `run`, by flag and by environment variable

const BAD_VALUE: Record<string, string> = {
  kafkaBrokers: 'broker-without-port',
  schema: 'no-dashes',
  clientId: 'has space',
  deadLetterPolicyByTopic: 'orders=maybe',
  metricsAddress: 'nowhere',
};

/**
 * Settings whose value is free text (a file name, a user name, a password): no value is
 * wrong by its syntax, so the probe does not apply; each has a case of its own below
 * (a file that does not exist, a user name or password without a mechanism), and the
 * suite's count check makes sure it does.
 */
export const FREE_TEXT_SETTINGS: ReadonlySet<string> = new Set(['kafkaSslCaFile', 'kafkaSslCertFile', 'kafkaSslKeyFile', 'kafkaSaslUsername', 'kafkaSaslPassword', 'encodingsFile']);

/** An encodings file holding the registry's password, which it must not (a secret comes from the environment). */
const encodingsWithPassword = (() => {
  const file = join(mkdtempSync(join(tmpdir(), 'hostile-encodings-')), 'encodings.json');
  writeFileSync(file, JSON.stringify({ schemaRegistry: { url: 'http://127.0.0.1:1', username: 'relay', password: 'hostile-registry-pw' }, rules: [] }));
  return file;
})();

function configCases(): HostileCase[] {
  const out: HostileCase[] = [];
  // Every setting once, by its flag and by its variable in turn (each spawn costs a
  // second or so on a loaded 2-core box); secrets only by variable.
  RUN_SETTINGS.forEach((s, i) => {
    const bad = BAD_VALUE[s.option] ?? 'x9!';
    const accepted = !('problem' in s.parse(bad));
    if (accepted !== FREE_TEXT_SETTINGS.has(s.option)) {
      // Never drop a setting silently: its case fails, saying what to do.
      const why = accepted
        ? `its parser accepts the probe ${JSON.stringify(bad)}: give it a BAD_VALUE it must refuse, or list it in FREE_TEXT_SETTINGS with a case of its own`
        : `it is listed in FREE_TEXT_SETTINGS but its parser refuses ${JSON.stringify(bad)}: take it off the list`;
      out.push({ class: 'config', name: `${s.env}: the probe`, run: async () => assert.fail(`${s.env}: ${why}`) });
      return;
    }
    if (accepted) return;
    const escaped = (name: string): string => name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    if (s.flag && i % 2 === 0) {
      out.push(cli({ class: 'config', name: `${s.flag} ${JSON.stringify(bad)}`, args: ['run', s.flag, bad], code: 2, pattern: new RegExp(`^outbox-relay: ${escaped(s.flag)}: `) }));
    } else {
      out.push(cli({ class: 'config', name: `${s.env}=${JSON.stringify(bad)}`, args: ['run'], env: { [s.env]: bad }, code: 2, pattern: new RegExp(`^outbox-relay: ${escaped(s.env)}: `), secrets: s.secret ? [bad] : [] }));
    }
  });
  out.push(
    cli({ class: 'config', name: '--kafka-ssl-ca-file that does not exist', args: ['run', '--kafka-ssl-ca-file', '/nonexistent/ca.pem'], code: 2, pattern: /^outbox-relay: --kafka-ssl-ca-file: cannot read \/nonexistent\/ca\.pem/ }),
    cli({ class: 'config', name: 'KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE that do not exist', args: ['run'], env: { KAFKA_SSL_CERT_FILE: '/nonexistent/c.pem', KAFKA_SSL_KEY_FILE: '/nonexistent/k.pem' }, code: 2, pattern: /^outbox-relay: KAFKA_SSL_CERT_FILE: cannot read/ }),
    cli({ class: 'config', name: 'KAFKA_SSL_KEY_FILE that does not exist (the certificate readable)', args: ['run'], env: { KAFKA_SSL_CERT_FILE: readableCertificate, KAFKA_SSL_KEY_FILE: '/nonexistent/k.pem' }, code: 2, pattern: /^outbox-relay: KAFKA_SSL_KEY_FILE: cannot read \/nonexistent\/k\.pem/ }),
    cli({ class: 'config', name: 'KAFKA_SASL_PASSWORD without a mechanism', args: ['run'], env: { KAFKA_SASL_PASSWORD: 'hostile-sasl-pw' }, code: 2, pattern: /^outbox-relay: KAFKA_SASL_PASSWORD: is set but no SASL mechanism/, secrets: ['hostile-sasl-pw'] }),
    cli({ class: 'config', name: '--encodings-file that does not exist', args: ['run', '--encodings-file', '/nonexistent/encodings.json'], code: 2, pattern: /^outbox-relay: --encodings-file: cannot read \/nonexistent\/encodings\.json/ }),
    cli({ class: 'config', name: 'an encodings file holding the registry password', args: ['run'], env: { OUTBOX_ENCODINGS_FILE: encodingsWithPassword }, code: 2, pattern: /^outbox-relay: encodings\.schemaRegistry\.password: is a secret/, secrets: ['hostile-registry-pw'] }),
    cli({ class: 'config', name: 'KAFKA_SASL_USERNAME without a mechanism', args: ['run'], env: { KAFKA_SASL_USERNAME: 'bob' }, code: 2, pattern: /^outbox-relay: KAFKA_SASL_USERNAME: / }),
    cli({ class: 'config', name: 'a duplicated topic in --dead-letter-policy-topics', args: ['run', '--dead-letter-policy-topics', 'orders=park,orders=skip'], code: 2, pattern: /^outbox-relay: --dead-letter-policy-topics: .*orders/ }),
    cli({ class: 'config', name: 'an empty --batch-size', args: ['run', '--batch-size', ''], code: 2, pattern: /^outbox-relay: --batch-size: "" is not a whole number/ }),
    cli({ class: 'config', name: 'a huge --batch-size', args: ['run', '--batch-size', '99999999999999999999999'], code: 2, pattern: /^outbox-relay: --batch-size: / }),
    cli({ class: 'config', name: 'a 5000-character --client-id', args: ['run', '--client-id', 'c'.repeat(5000)], code: 2, pattern: /^outbox-relay: --client-id: / }),
    cli({ class: 'config', name: 'a unicode --schema', args: ['run', '--schema', 'schéma_ü'], code: 2, pattern: /^outbox-relay: --schema: .* is not a valid name/ }),
    cli({ class: 'config', name: 'a unicode --client-id', args: ['run', '--client-id', 'relé-😀'], code: 2, pattern: /^outbox-relay: --client-id: / }),
    cli({ class: 'config', name: 'SQL injection in --schema (run)', args: ['run', '--schema', 'x"; DROP SCHEMA public CASCADE; --'], code: 2, pattern: /^outbox-relay: --schema: .* is not a valid name/ }),
    cli({ class: 'config', name: 'SQL injection in OUTBOX_SCHEMA (status)', args: ['status'], env: { OUTBOX_SCHEMA: "public'; DROP TABLE outbox; --" }, code: 2, pattern: /^outbox-relay: OUTBOX_SCHEMA: / }),
    cli({ class: 'config', name: 'SQL injection in --schema (dead-letters list)', args: ['dead-letters', 'list', '--schema', 'a;b'], code: 2, pattern: /^outbox-relay: --schema: / }),
    cli({ class: 'config', name: 'SQL injection in --schema (cleanup)', args: ['cleanup', '--schema', 'Robert"); DROP TABLE outbox;--'], code: 2, pattern: /^outbox-relay: --schema: / }),
    cli({ class: 'config', name: 'a 64-character --schema', args: ['migrate', '--schema', 's'.repeat(64)], code: 2, pattern: /^outbox-relay: --schema: / }),
    cli({ class: 'config', name: 'an unknown flag', args: ['run', '--bach-size', '5'], code: 2, pattern: /unknown option '--bach-size'/ }),
    cli({ class: 'config', name: 'a flag without its value', args: ['run', '--batch-size'], code: 2, pattern: /--batch-size/ }),
    cli({ class: 'config', name: 'an unknown command', args: ['rum'], code: 2, pattern: /unknown command 'rum'/ }),
    cli({ class: 'config', name: 'no KAFKA_BROKERS at all', args: ['run'], env: { KAFKA_BROKERS: '' }, code: 2, pattern: /^outbox-relay: --kafka-brokers: is required \(set --kafka-brokers or KAFKA_BROKERS\)$/ }),
  );
  return out;
}

// ---------------------------------------------------------------------------------------
// schema state

/** A schema set up by `prepare`, then `args` run against it: one line, exit `code`, and
 *  the schema's tables unchanged (nothing created or repaired behind the operator's back). */
function schemaCase(c: { name: string; prepare: (pool: pg.Pool, schema: string) => Promise<void>; args: string[]; code: number; pattern: (schema: string) => RegExp; knownBug?: string; timeoutMs?: number }): HostileCase {
  return {
    class: 'schema state',
    name: c.name,
    ...(c.knownBug ? { knownBug: c.knownBug } : {}),
    async run(w) {
      const schema = uniqueName('hostile_state');
      await c.prepare(w.base.pool, schema);
      try {
        const before = await snapshotSchema(w.base.pool, schema);
        const o = await runCli(c.args, { DATABASE_URL, OUTBOX_SCHEMA: schema }, c.timeoutMs);
        assertOneLine(o, c.code, c.pattern(schema));
        assert.deepEqual(await snapshotSchema(w.base.pool, schema), before, 'schema unchanged');
      } finally {
        await w.base.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      }
    },
  };
}

async function migrated(pool: pg.Pool, schema: string): Promise<void> {
  const { migrate } = await import('../../src/commands/migrate.js');
  await migrate({ databaseUrl: DATABASE_URL, schema });
  void pool;
}

function schemaCases(): HostileCase[] {
  return [
    schemaCase({ name: 'run on a schema never migrated', prepare: async () => undefined, args: ['run'], code: 1, pattern: (s) => new RegExp(`^outbox-relay: schema "${s}" has no outbox tables`) }),
    schemaCase({ name: 'status on a schema never migrated', prepare: async () => undefined, args: ['status'], code: 1, pattern: (s) => new RegExp(`schema "${s}"`) }),
    schemaCase({ name: 'dead-letters list on a schema never migrated', prepare: async () => undefined, args: ['dead-letters', 'list'], code: 1, pattern: (s) => new RegExp(`schema "${s}"`) }),
    schemaCase({
      name: 'run on a schema of the same name holding someone else\'s outbox table',
      prepare: async (pool, s) => void (await pool.query(`CREATE SCHEMA "${s}"; CREATE TABLE "${s}".outbox (id int PRIMARY KEY, body text)`)),
      args: ['run'],
      code: 1,
      pattern: (s) => new RegExp(`schema "${s}"`),
    }),
    schemaCase({
      name: 'run on a partly migrated schema (dead-letter table dropped)',
      prepare: async (pool, s) => {
        await migrated(pool, s);
        await pool.query(`DROP TABLE "${s}".outbox_parked_keys, "${s}".outbox_dead_letters`);
      },
      args: ['run'],
      code: 1,
      pattern: (s) => new RegExp(`schema "${s}".*(outbox_dead_letters|migrat)`),
      // It must refuse at once; a relay that starts anyway is killed after this long.
      timeoutMs: 20_000,
    }),
    schemaCase({
      name: 'run on a schema whose migrations table claims a version from the future',
      prepare: async (pool, s) => {
        await migrated(pool, s);
        await pool.query(`INSERT INTO "${s}".outbox_migrations (id, name) VALUES (999, '999_future.sql')`);
      },
      args: ['run'],
      timeoutMs: 20_000,
      code: 1,
      pattern: (s) => new RegExp(`schema "${s}".*(newer|999|version)`),
    }),
  ];
}

// ---------------------------------------------------------------------------------------
// operator commands, against the base (one dead letter, 4242)

function operatorCases(): HostileCase[] {
  const op = (name: string, args: string[] | ((w: World) => string[]), code: number, pattern: RegExp): HostileCase => cli({ class: 'operator', name, args, code, pattern });
  return [
    op('dead-letters list of an unknown id', ['dead-letters', 'list', '99'], 1, /^outbox-relay: dead letter 99 does not exist/),
    op('dead-letters list of a non-numeric id', ['dead-letters', 'list', 'abc'], 2, /^outbox-relay: id: "abc" is not a dead letter id/),
    op('dead-letters list of id 0', ['dead-letters', 'list', '0'], 2, /^outbox-relay: id: "0" is not a dead letter id/),
    op('dead-letters list of a huge id', ['dead-letters', 'list', '99999999999999999999999'], 2, /^outbox-relay: id: /),
    op('dead-letters list --since yesterday', ['dead-letters', 'list', '--since', 'yesterday'], 2, /^outbox-relay: --since: "yesterday"/),
    op('dead-letters list --until with a bad duration', ['dead-letters', 'list', '--until', '5 parsecs'], 2, /^outbox-relay: --until: /),
    op('dead-letters list --policy maybe', ['dead-letters', 'list', '--policy', 'maybe'], 2, /^outbox-relay: --policy: /),
    op('dead-letters list --limit 0', ['dead-letters', 'list', '--limit', '0'], 2, /^outbox-relay: --limit: 0 is not a whole number/),
    op('dead-letters replay without a selection', ['dead-letters', 'replay'], 2, /^outbox-relay: dead-letters: no dead letters named/),
    op('dead-letters replay --all with an id', (w) => ['dead-letters', 'replay', '--all', String(w.deadLetterId)], 2, /^outbox-relay: --all: cannot be combined/),
    op('dead-letters replay --rate 0', (w) => ['dead-letters', 'replay', String(w.deadLetterId), '--rate', '0'], 2, /^outbox-relay: --rate: /),
    op('dead-letters replay of a filter matching nothing', ['dead-letters', 'replay', '--topic', 'no-such-topic'], 1, /^outbox-relay: no dead letter matches .*no-such-topic.*nothing was replayed/),
    {
      class: 'operator',
      name: 'dead-letters discard without --yes',
      async run(w) {
        const before = await baseState(w);
        const o = await runCli(['dead-letters', 'discard', String(w.deadLetterId)], { DATABASE_URL, OUTBOX_SCHEMA: w.base.schema });
        assert.equal(o.code, 2, o.output);
        const errors = o.lines.filter((l) => l.startsWith('outbox-relay: '));
        assert.deepEqual(errors, ['outbox-relay: --yes: is required to discard these 1 dead letters; nothing was discarded']);
        assert.ok(o.lines.some((l) => l.startsWith(String(w.deadLetterId))), 'lists what it would discard');
        assert.deepEqual(await baseState(w), before);
      },
    },
    op('dead-letters discard --yes of an unknown id', ['dead-letters', 'discard', '77', '--yes'], 1, /^outbox-relay: dead letter 77 does not exist; nothing was discarded/),
    op('cleanup --retention 5 (no unit)', ['cleanup', '--retention', '5'], 2, /^outbox-relay: --retention: /),
    op('cleanup --retention -1d', ['cleanup', '--retention', '-1d'], 2, /^outbox-relay: --retention: /),
    op('cleanup --batch-size 0', ['cleanup', '--batch-size', '0'], 2, /^outbox-relay: --batch-size: /),
    op('purge-processed --retention 1h (under a day)', ['purge-processed', '--retention', '1h'], 2, /^outbox-relay: --retention: /),
  ];
}

// ---------------------------------------------------------------------------------------
// the consumer library: bad options throw a ConfigError naming the option, before anything connects

function consumerCases(): HostileCase[] {
  const handler = async (): Promise<void> => undefined;
  const bad = (name: string, options: (topic: string) => Record<string, unknown>, pattern: RegExp): HostileCase => ({
    class: 'consumer library',
    name,
    async run(w) {
      const { createConsumer } = await import('../../src/consumer/consumer.js');
      const before = await baseState(w);
      const base = { kafkaBrokers: testBrokers(), databaseUrl: DATABASE_URL, schema: w.base.schema, groupId: 'hostile-group', topics: [w.topic], handler };
      assert.throws(
        () => createConsumer({ ...base, ...options(w.topic) } as never),
        (error: unknown) => {
          assert.ok(error instanceof ConfigError, `a ConfigError, got ${String(error)}`);
          assert.match(error.message, pattern);
          assert.equal(error.message.includes('\n'), false, 'one line');
          return true;
        },
      );
      assert.deepEqual(await baseState(w), before);
    },
  });
  return [
    bad('no handler', () => ({ handler: undefined }), /^handler: /),
    bad('a handler that is a string', () => ({ handler: 'process' }), /^handler: /),
    bad('an empty topic list', () => ({ topics: [] }), /^topics: /),
    bad('an illegal topic name', () => ({ topics: ['bad topic!'] }), /^topics: /),
    bad('a group id with a space', () => ({ groupId: 'my group' }), /^groupId: /),
    bad('no broker and no kafka client', () => ({ kafkaBrokers: undefined }), /^kafka: /),
    bad('no database', () => ({ databaseUrl: undefined }), /^pool: /),
    bad('decode "xml"', () => ({ decode: 'xml' }), /^decode: /),
    bad('a dead-letter topic that is one of the consumed topics', (topic) => ({ deadLetterTopic: topic }), /^deadLetterTopic: /),
    bad('retryBaseDelayMs above retryMaxDelayMs', () => ({ retryBaseDelayMs: 5000, retryMaxDelayMs: 100 }), /^retryBaseDelayMs: /),
    bad('heartbeatIntervalMs not below sessionTimeoutMs', () => ({ heartbeatIntervalMs: 30000, sessionTimeoutMs: 10000 }), /^heartbeatIntervalMs: /),
    bad('batchesInFlight 0', () => ({ batchesInFlight: 0 }), /^batchesInFlight: /),
    bad('maxAttempts -1', () => ({ maxAttempts: -1 }), /^maxAttempts: /),
    bad('an injected schema name', () => ({ schema: 'x"; drop table y; --' }), /^schema: /),
    {
      class: 'consumer library',
      name: 'a handler that runs COMMIT on ctx.client: that message fails loudly, no unhandled message is recorded as processed',
      async run() {
        const { createConsumer } = await import('../../src/consumer/consumer.js');
        const t = await createTestSchema('hostile_commit');
        const topic = await createTopic(1, testBrokers(), 'hostile_commit');
        const producer = testKafka().producer();
        await producer.connect();
        const { randomUUID } = await import('node:crypto');
        const ids = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
        await producer.send({ topic, messages: ids.map((id, i) => ({ key: 'k', value: JSON.stringify({ i }), headers: { 'message-id': id, 'outbox-id': String(i + 1) } })) });
        await producer.disconnect();
        await t.pool.query(`CREATE TABLE "${t.schema}".ran (message_id uuid)`);
        const errors: unknown[] = [];
        const consumer = createConsumer({
          kafkaBrokers: testBrokers(),
          databaseUrl: DATABASE_URL,
          schema: t.schema,
          groupId: uniqueName('hostile_commit'),
          topics: [topic],
          fromBeginning: true,
          maxAttempts: 1,
          handler: async (m: { headers: Record<string, string | undefined> }, ctx: { client: pg.PoolClient }) => {
            await ctx.client.query(`INSERT INTO "${t.schema}".ran VALUES ($1)`, [m.headers['message-id']]);
            if (m.headers['message-id'] === ids[0]) await ctx.client.query('COMMIT');
          },
        } as never);
        (consumer as unknown as { on(e: string, f: (x: unknown) => void): void }).on('error', (e) => errors.push(e));
        try {
          await consumer.start();
          await waitFor('every message handled, dead-lettered or failed', async () => {
            const s = consumer.stats();
            return s.processed + s.duplicates + s.deadLettered + (errors.length ? 1 : 0) >= ids.length;
          }, { timeoutMs: 30_000 });
        } finally {
          await consumer.stop();
        }
        const { rows: processed } = await t.pool.query(`SELECT key AS message_id FROM "${t.schema}".processed_messages`);
        const { rows: ran } = await t.pool.query(`SELECT DISTINCT message_id FROM "${t.schema}".ran`);
        const ranIds = new Set(ran.map((r) => r.message_id));
        for (const p of processed) assert.ok(ranIds.has(p.message_id), `message ${p.message_id} recorded as processed but its handler's effect is not there`);
        const s = consumer.stats();
        assert.ok(s.deadLettered + errors.length > 0, `the COMMIT message failed loudly (stats ${JSON.stringify(s)})`);
        await t.drop();
      },
    },
  ];
}

// ---------------------------------------------------------------------------------------
// secrets: a password never reaches the output, however the URL is malformed

function secretCases(): HostileCase[] {
  const url = (name: string, value: string, code: number, pattern: RegExp, secrets: string[]): HostileCase =>
    cli({ class: 'secrets', name, args: ['run'], env: { DATABASE_URL: value }, code, pattern, secrets });
  return [
    url('a password with an unescaped /', 'postgres://relay:9000/Secret@127.0.0.1:5432/app', 2, /^outbox-relay: DATABASE_URL: /, ['9000/Secret', 'Secret']),
    url('a password with an unescaped #', 'postgres://relay:pa#ss-X1@127.0.0.1:5432/app', 2, /^outbox-relay: DATABASE_URL: /, ['pa#ss', 'ss-X1']),
    url('a password with an unescaped ?', 'postgres://relay:pa?ss-X2@127.0.0.1:5432/app', 2, /^outbox-relay: DATABASE_URL: /, ['pa?ss', 'ss-X2']),
    // The URL parser takes the last '@': user relay, password p@ss-X3; Postgres then
    // refuses the unknown role, and the line must show no piece of the user info (the
    // user name included).
    { ...url('a password with an unescaped @ (the role is unknown to Postgres)', 'postgres://hostileuser:p@ss-X3@127.0.0.1:5432/app', 1, /^outbox-relay: cannot connect to Postgres at 127\.0\.0\.1:5432\/app/, ['ss-X3', 'hostileuser']) },
    url('a password with a bad % escape', 'postgres://relay:pa%zzss-X4@127.0.0.1:1/app', 1, /^outbox-relay: cannot connect to Postgres at 127\.0\.0\.1:1\/app/, ['zzss-X4', 'pa%zz']),
    url('a good password, database unreachable', 'postgres://relay:Wh0le-Secret@127.0.0.1:1/app', 1, /^outbox-relay: cannot connect to Postgres at 127\.0\.0\.1:1\/app/, ['Wh0le-Secret', 'relay:Wh0']),
    cli({ class: 'secrets', name: 'a password as a flag is refused without echoing it', args: ['run', '--kafka-sasl-password', 'Fl4g-Secret'], code: 2, pattern: /unknown option '--kafka-sasl-password'/, secrets: ['Fl4g-Secret'] }),
    cli({ class: 'secrets', name: 'DATABASE_URL_FILE that does not exist', args: ['run'], env: { DATABASE_URL: '', DATABASE_URL_FILE: '/nonexistent/url' }, code: 2, pattern: /^outbox-relay: DATABASE_URL_FILE: cannot read/ }),
  ];
}

// ---------------------------------------------------------------------------------------
// HTTP: bad metrics addresses

function httpCases(): HostileCase[] {
  return [
    cli({ class: 'http', name: '--metrics-address with a port out of range', args: ['run', '--metrics-address', '127.0.0.1:70000'], code: 2, pattern: /^outbox-relay: --metrics-address: / }),
    cli({ class: 'http', name: '--metrics-address without a port', args: ['run', '--metrics-address', '127.0.0.1'], code: 2, pattern: /^outbox-relay: --metrics-address: / }),
    cli({ class: 'http', name: 'OUTBOX_METRICS_ADDRESS a URL', args: ['run'], env: { OUTBOX_METRICS_ADDRESS: 'http://127.0.0.1:9464/metrics' }, code: 2, pattern: /^outbox-relay: OUTBOX_METRICS_ADDRESS: / }),
    {
      class: 'http',
      name: '--metrics-address on a port already in use: exit 1 naming the address, leases given back',
      async run() {
        const t = await createTestSchema('hostile_http');
        const server = createServer();
        await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
        const port = (server.address() as { port: number }).port;
        try {
          const o = await runCli(['run', '--metrics-address', `127.0.0.1:${port}`], { DATABASE_URL, OUTBOX_SCHEMA: t.schema });
          const errors = o.lines.filter((l) => l.startsWith('outbox-relay: '));
          assert.equal(o.code, 1, o.output);
          assert.equal(errors.length, 1, o.output);
          assert.match(errors[0]!, new RegExp(`127\\.0\\.0\\.1:${port}`));
          const { rows } = await t.pool.query(`SELECT (SELECT count(*) FROM "${t.schema}".outbox_shard_leases WHERE owner IS NOT NULL)::int AS held, (SELECT count(*) FROM "${t.schema}".outbox_relays)::int AS members`);
          assert.deepEqual(rows[0], { held: 0, members: 0 }, 'nothing left half-done');
        } finally {
          server.close();
          await t.drop();
        }
      },
    },
  ];
}

// ---------------------------------------------------------------------------------------
// signals: each stops the relay cleanly, sends what it claimed and gives the leases back

function signalCase(signal: NodeJS.Signals): HostileCase {
  return {
    class: 'signals',
    name: `${signal} to a running relay`,
    async run() {
      const t = await createTestSchema('hostile_sig');
      const topic = await createTopic(1);
      try {
        await t.pool.query(`INSERT INTO "${t.schema}".outbox (topic, key, payload) SELECT $1, 'k' || g, '{}' FROM generate_series(1, 10) g`, [topic]);
        const relay = spawnCli(['run'], { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: t.schema, OUTBOX_LEASE_TTL_MS: '60000' });
        await waitFor('rows sent', async () => (await t.pool.query(`SELECT count(*)::int AS n FROM "${t.schema}".outbox WHERE sent_at IS NULL`)).rows[0].n === 0, { timeoutMs: 60_000 });
        relay.child.kill(signal);
        const o = await finish(relay);
        assert.equal(o.code, 0, o.output);
        const stopping = o.lines.filter((l) => l.includes(`"signal":"${signal}"`));
        assert.equal(stopping.length, 1, `one log line naming ${signal}:\n${o.output}`);
        const { rows } = await t.pool.query(`SELECT (SELECT count(*) FROM "${t.schema}".outbox_shard_leases WHERE owner IS NOT NULL)::int AS held, (SELECT count(*) FROM "${t.schema}".outbox_relays)::int AS members`);
        assert.deepEqual(rows[0], { held: 0, members: 0 });
        const messages = await readTopic(topic, (m) => m.length >= 10);
        assert.equal(new Set(messages.map((m) => m.headers['message-id'])).size, 10);
        assert.equal(await topicSize(topic), 10, 'each row once');
      } finally {
        await t.drop();
      }
    },
  };
}

/** Every case, in the order they are reported. */
export function hostileCases(): HostileCase[] {
  return [
    ...configCases(),
    ...schemaCases(),
    ...rowCases(),
    ...operatorCases(),
    ...consumerCases(),
    ...secretCases(),
    ...httpCases(),
    signalCase('SIGTERM'),
    signalCase('SIGINT'),
    signalCase('SIGHUP'),
  ];
}
