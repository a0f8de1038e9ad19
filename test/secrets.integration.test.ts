import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { connect, describeDatabase, redactDatabaseUrl } from '../src/shared/database.js';
import { createRelay } from '../src/relay/relay.js';
import { createTestSchema, DATABASE_URL, type TestSchema } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';

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
