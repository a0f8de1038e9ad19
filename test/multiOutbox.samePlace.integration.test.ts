import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Writable } from 'node:stream';
import { createLogger } from '../src/shared/logger.js';
import { createRelayGroup } from '../src/relay/relayGroup.js';
import { migrate } from '../src/commands/migrate.js';
import { ConfigError } from '../src/shared/errors.js';
import { createTestSchema, DATABASE_URL, uniqueName, type TestSchema } from './helpers/db.js';
import { testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// Two entries of an outboxes list on one outbox, under URLs whose text differs
// (127.0.0.1 and localhost): the list check, which reads only the text, passes them;
// the relay group compares where their connections land (server, database, schema) and
// refuses the second, naming both. Real Postgres; Kafka only for the relays that start.

let a: TestSchema;
let admin: pg.Pool;

/** The same URL with the host spelled `localhost`: another text, the same server. */
function viaLocalhost(url: string): string {
  const u = new URL(url);
  assert.equal(u.hostname, '127.0.0.1', 'the test database is reached by 127.0.0.1');
  u.hostname = 'localhost';
  return u.toString();
}

function groupOptions(outboxes: Array<{ name: string; databaseUrl: string; schema: string }>) {
  return { outboxes, kafkaBrokers: testBrokers(), producer: TEST_PRODUCER, leaseTtlMs: 2_000, retryMaxDelayMs: 1_000 };
}

before(async () => {
  a = await createTestSchema('same_place');
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
});

after(async () => {
  await admin.end();
  await a.drop();
});

test('integration: two entries on one outbox under 127.0.0.1 and localhost pass the list check but are refused at start, naming both; nothing starts', async () => {
  const group = createRelayGroup(
    groupOptions([
      { name: 'orders', databaseUrl: a.databaseUrl, schema: a.schema },
      { name: 'orders_again', databaseUrl: viaLocalhost(a.databaseUrl), schema: a.schema },
    ]),
  );
  const states: string[] = [];
  group.on('outbox', (e) => states.push(`${e.name}:${e.state}`));
  await assert.rejects(group.start(), (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    assert.equal(e.retriable, false);
    assert.match(e.message, /^outbox orders_again: is the same outbox as outbox orders: localhost:5432\/test and 127\.0\.0\.1:5432\/test reach one server \d+ started .*, database test, schema same_place_\w+; list it once$/);
    return true;
  });
  await group.stop();
  assert.deepEqual(states, [], 'no outbox was started nor tried');
  const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${a.schema}".outbox_relays`);
  assert.equal(rows[0].n, 0, 'no relay registered in the outbox');
});

test('integration: the same server under both spellings with another schema is no duplicate: both start', async () => {
  const other = await createTestSchema('same_place_b');
  const group = createRelayGroup(
    groupOptions([
      { name: 'orders', databaseUrl: a.databaseUrl, schema: a.schema },
      { name: 'tenant_b', databaseUrl: viaLocalhost(other.databaseUrl), schema: other.schema },
    ]),
  );
  try {
    await group.start();
    assert.deepEqual(group.outboxes.map((o) => o.state), ['running', 'running']);
  } finally {
    await group.stop();
    await other.drop();
  }
});

test('integration: two entries on one outbox whose database is down at start: the first reached runs, the second is refused once reached (unavailable, naming both); the other outbox runs throughout', async () => {
  const database = uniqueName('same_place_db');
  await admin.query(`CREATE DATABASE "${database}"`);
  const url = new URL(DATABASE_URL);
  url.pathname = `/${database}`;
  const downUrl = url.toString();
  await migrate({ databaseUrl: downUrl, schema: 'outbox' });
  await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
  const logged: Array<{ level: number; msg: string; outbox?: string; err?: string }> = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) logged.push(JSON.parse(line));
      done();
    },
  });
  const group = createRelayGroup({
    ...groupOptions([
      { name: 'steady', databaseUrl: a.databaseUrl, schema: a.schema },
      { name: 'late', databaseUrl: downUrl, schema: 'outbox' },
      { name: 'late_again', databaseUrl: viaLocalhost(downUrl), schema: 'outbox' },
    ]),
    logger: createLogger('info', sink),
  });
  try {
    await group.start();
    assert.deepEqual(group.outboxes.map((o) => o.state), ['running', 'unavailable', 'unavailable'], 'precondition: the two were down at start');
    assert.match(group.outboxes[1]!.error ?? '', /cannot connect to Postgres/);

    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);
    await waitFor('one of the two to run and the other to be refused', async () =>
      group.outboxes.some((o) => o.state === 'running' && o.name !== 'steady') && group.outboxes.some((o) => /is the same outbox as/.test(o.error ?? '')),
    );
    const running = group.outboxes.find((o) => o.name !== 'steady' && o.state === 'running')!;
    const refused = group.outboxes.find((o) => /is the same outbox as/.test(o.error ?? ''))!;
    assert.equal(refused.state, 'unavailable');
    assert.match(refused.error!, new RegExp(`^outbox ${refused.name}: is the same outbox as outbox ${running.name}: .*database ${database}, schema outbox; list it once$`));
    assert.equal(group.outboxes[0]!.state, 'running');
    // pino's level 50 is error.
    const line = logged.find((l) => l.outbox === refused.name && l.level === 50);
    assert.ok(line, 'the refusal is logged as an error');
    assert.match(line.msg, /outbox refused: another outbox of the list is the same one/);
    assert.match(line.err ?? '', /is the same outbox as outbox/);
  } finally {
    await group.stop();
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`).catch(() => undefined);
  }
});
