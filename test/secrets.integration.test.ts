import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { connect, describeDatabase, redactDatabaseUrl } from '../src/shared/database.js';
import { createRelay } from '../src/relay/relay.js';
import { createTestSchema, DATABASE_URL, type TestSchema } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Generated passwords hold characters that a URL gives meaning to. Written into
// DATABASE_URL without percent-encoding, they make URL parsers (ours and pg's) read part
// of the password as host, port or database name. However the URL is malformed, no part
// of the password may be printed: not in a settings error, not in a connection error,
// not in the `relay started` line.
// No piece of them is all digits except the one that must parse as a port ('9000'): a
// piece like '100' turns up in any log line's timestamp (a run failed on "time":…1007…).
const PASSWORDS = ['9000/Secret', 'p@ss@word-9', 'col:on:pass', 'hash#tag#pw', 'que?ry=pw', '1x0%sure-pw', 'all/@:#?%-mix'];

/** Pieces of a password that would give it away: the whole, and each run of 3+ between URL delimiters. */
function pieces(password: string): string[] {
  return [password, ...password.split(/[/@:#?%]/).filter((p) => p.length >= 3)];
}

/** The logger's own numbers (time, pid) and the metrics server's port say nothing of the input; they are left out. */
function withoutOwnNumbers(text: string): string {
  return text.replace(/"(time|pid)":\d+/g, '"$1":_').replace(/http:\/\/127\.0\.0\.1:\d+/g, 'http://127.0.0.1:_');
}

function assertNoPiece(text: string, password: string, where: string): void {
  const checked = withoutOwnNumbers(text);
  for (const piece of pieces(password)) assert.ok(!checked.includes(piece), `${where} shows ${JSON.stringify(piece)} of the password: ${text}`);
}

const server = new URL(DATABASE_URL);
const hostPortDb = `${server.hostname}:${server.port || '5432'}${server.pathname}`;
const unescaped = (pw: string): string => `postgres://${server.username || 'postgres'}:${pw}@${hostPortDb}`;
const escaped = (pw: string): string => `postgres://${server.username || 'postgres'}:${encodeURIComponent(pw)}@${hostPortDb}`;

let db: TestSchema;
before(async () => {
  db = await createTestSchema('secrets');
});
after(async () => {
  await db.drop();
});

for (const pw of PASSWORDS) {
  const shape = JSON.stringify(pw.replace(/[A-Za-z0-9-]/g, 'x'));
  test(`integration: DATABASE_URL with the password ${shape} written unescaped: run, status and migrate never show a piece of it`, async () => {
    for (const command of ['status', 'migrate']) {
      const p = spawnCli([command, '--schema', db.schema], { DATABASE_URL: unescaped(pw), OUTBOX_LOG_LEVEL: 'debug' });
      const code = await p.exited;
      // Either the URL still says what was meant (an '@' or ':' inside the password is
      // read right by URL parsing, taking the last '@') and the command works, or it
      // fails with one line: 2 for a URL refused up front, 1 when the driver refuses it.
      if (code !== 0) {
        assert.ok(code === 1 || code === 2, `${command}: exit ${code}: ${p.output()}`);
        assert.equal(p.output().trim().split('\n').length, 1, `${command}: one line: ${p.output()}`);
        assert.match(p.output(), /^outbox-relay: /);
      }
      assertNoPiece(p.output(), pw, command);
    }
    const relay = spawnCli(['run', '--schema', db.schema], { DATABASE_URL: unescaped(pw), KAFKA_BROKERS: testBrokers().join(','), OUTBOX_LOG_LEVEL: 'debug' });
    let exited = false;
    void relay.exited.then(() => (exited = true));
    await waitFor('the relay to start or exit', () => exited || /relay started/.test(relay.output()));
    if (!exited) {
      relay.child.kill('SIGTERM');
      assert.equal(await relay.exited, 0, relay.output());
    } else {
      assert.ok([1, 2].includes((await relay.exited) as number), relay.output());
    }
    assertNoPiece(relay.output(), pw, 'run');
  });
}

test('integration: the same passwords percent-encoded connect, and are never shown', async () => {
  for (const pw of PASSWORDS) {
    const p = spawnCli(['status', '--schema', db.schema], { DATABASE_URL: escaped(pw) });
    assert.equal(await p.exited, 0, p.output());
    assert.match(p.output(), /backlog|pending/i);
    assertNoPiece(p.output(), pw, 'status output');
  }
});

// Unencoded, these are not URLs (a '/' or '?' or '#' ends the authority early).
const REFUSED_AS_URL = new Set(['9000/Secret', 'hash#tag#pw', 'que?ry=pw', 'all/@:#?%-mix']);

test('integration: library connection errors and descriptions never show the user info', async () => {
  for (const pw of PASSWORDS) {
    // Port 1: nothing listens there, so the driver fails and its message is shown.
    const url = `postgres://relay:${pw}@127.0.0.1:1/app`;
    assertNoPiece(describeDatabase(url), pw, 'describeDatabase');
    await assert.rejects(connect(url, 'secrets-test'), (error: Error) => {
      assertNoPiece(error.message, pw, 'connect()');
      return true;
    });
    // A URL the parser refuses fails createRelay at once; one it takes fails start(), on
    // port 1. Both errors are checked, and which class each password falls in is pinned,
    // so neither path can pass by not running.
    let refused: Error | undefined;
    let relay: ReturnType<typeof createRelay> | undefined;
    try {
      relay = createRelay({ databaseUrl: url, kafkaBrokers: testBrokers() });
    } catch (error) {
      refused = error as Error;
    }
    assert.equal(refused !== undefined, REFUSED_AS_URL.has(pw), `createRelay() ${refused ? 'refused' : 'took'} ${JSON.stringify(pw)}: ${refused?.message}`);
    if (refused) {
      assert.match(refused.message, /^databaseUrl: /);
      assertNoPiece(refused.message, pw, 'createRelay()');
    } else {
      await assert.rejects(relay!.start(), (error: Error) => {
        assert.match(error.message, /cannot connect to Postgres at 127\.0\.0\.1:1\/app/);
        assertNoPiece(error.message, pw, 'createRelay().start()');
        return true;
      });
    }
    assertNoPiece(redactDatabaseUrl(`database "${pw}@127.0.0.1:1/app" does not exist`, url), pw, 'redactDatabaseUrl');
  }
});

// A file named by mistake where the CLI expects another one (the outboxes file, a TLS
// file, a URL file) may be a secret: no error, log or message may carry any of its text.
const FILE_SECRET = 'Zq7hunter2XkPw9vT';

function assertNoFileText(text: string, where: string): void {
  for (let i = 0; i + 6 <= FILE_SECRET.length; i++) {
    const piece = FILE_SECRET.slice(i, i + 6);
    assert.ok(!text.includes(piece), `${where} shows ${JSON.stringify(piece)} of the file: ${text}`);
  }
}

test('integration: a secret file named where another file is expected: every command refuses with one line that quotes none of it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-secret-'));
  const files = {
    plain: join(dir, 'db-password'),
    json: join(dir, 'password.json'),
    lines: join(dir, 'credentials'),
  };
  writeFileSync(files.plain, `${FILE_SECRET}\n`);
  writeFileSync(files.json, JSON.stringify({ password: FILE_SECRET }));
  writeFileSync(files.lines, `{\n  "outboxes": [],\n  ${FILE_SECRET}\n}\n`);
  const listWith = (entry: Record<string, unknown>): string => {
    const f = join(dir, `list-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(f, JSON.stringify({ outboxes: [{ name: 'one', schema: db.schema, ...entry }] }));
    return f;
  };
  const brokers = { KAFKA_BROKERS: testBrokers().join(',') };
  const cases: Array<{ args: string[]; env: Record<string, string>; pattern: RegExp }> = [];
  for (const file of Object.values(files)) {
    cases.push(
      { args: ['run', '--outboxes-file', file], env: brokers, pattern: /^outbox-relay: \S+: (is not JSON|has unknown top-level key "password")/ },
      { args: ['migrate', '--outboxes-file', file], env: {}, pattern: /^outbox-relay: \S+: (is not JSON|has unknown top-level key)/ },
      { args: ['status'], env: { OUTBOX_OUTBOXES_FILE: file }, pattern: /^outbox-relay: \S+: (is not JSON|has unknown top-level key)/ },
      { args: ['cleanup', '--outboxes-file', file], env: {}, pattern: /^outbox-relay: \S+: (is not JSON|has unknown top-level key)/ },
    );
  }
  cases.push(
    { args: ['status'], env: { DATABASE_URL_FILE: files.plain }, pattern: /^outbox-relay: DATABASE_URL_FILE: is not a URL/ },
    { args: ['run'], env: { ...brokers, DATABASE_URL_FILE: files.json }, pattern: /^outbox-relay: DATABASE_URL_FILE: is not a URL/ },
    { args: ['status', '--outboxes-file', listWith({ databaseUrlFile: files.plain })], env: {}, pattern: /^outbox-relay: outbox one: database URL: is not a URL/ },
    { args: ['status'], env: { OUTBOX_OUTBOXES: 'one', OUTBOX_ONE_DATABASE_URL_FILE: files.lines }, pattern: /^outbox-relay: outbox one: database URL: is not a URL/ },
    { args: ['run', '--kafka-ssl-ca-file', files.plain], env: { ...brokers, DATABASE_URL }, pattern: /^outbox-relay: --kafka-ssl-ca-file: .* holds no PEM certificate/ },
    { args: ['run'], env: { ...brokers, DATABASE_URL, KAFKA_SSL_CERT_FILE: files.plain, KAFKA_SSL_KEY_FILE: files.plain }, pattern: /^outbox-relay: KAFKA_SSL_CERT_FILE: .* holds no PEM certificate/ },
    { args: ['run'], env: { ...brokers, DATABASE_URL, KAFKA_SASL_PASSWORD_FILE: files.json }, pattern: /^outbox-relay: KAFKA_SASL_PASSWORD_FILE: is set but no SASL mechanism is/ },
  );
  for (const c of cases) {
    const p = spawnCli(c.args, { OUTBOX_LOG_LEVEL: 'debug', ...c.env });
    const code = await p.exited;
    const where = `${c.args.join(' ')} ${JSON.stringify(c.env)}`;
    assert.equal(code, 2, `${where}: ${p.output()}`);
    assert.equal(p.output().trim().split('\n').length, 1, `${where}: one line: ${p.output()}`);
    assert.match(p.output(), c.pattern, where);
    assertNoFileText(p.output(), where);
  }
});

test('integration: a relay started with its SASL password from a file never shows the password, even at debug level while SASL fails', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-secret-'));
  const file = join(dir, 'sasl-password');
  writeFileSync(file, `${FILE_SECRET}\n`);
  // The test broker speaks no SASL: every attempt to publish this row fails and is logged.
  await db.pool.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ('secrets-sasl', 'k', '{}')`);
  const relay = spawnCli(['run', '--schema', db.schema], {
    DATABASE_URL,
    KAFKA_BROKERS: testBrokers().join(','),
    KAFKA_SASL_MECHANISM: 'plain',
    KAFKA_SASL_USERNAME: 'relay',
    KAFKA_SASL_PASSWORD_FILE: file,
    OUTBOX_LOG_LEVEL: 'debug',
  });
  await waitFor('the relay to start and log a Kafka failure', () => /relay started/.test(relay.output()) && /"level":(40|50)/.test(relay.output()), { timeoutMs: 60_000 });
  relay.child.kill('SIGTERM');
  await relay.exited;
  await db.pool.query(`DELETE FROM "${db.schema}".outbox WHERE topic = 'secrets-sasl'`);
  assert.match(relay.output(), /SASL|sasl|authentication/i, 'the failure is logged');
  assertNoFileText(relay.output(), 'run');
});
