import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Kafka, logLevel } from 'kafkajs';
import { GROUPED_DEAD_LETTERS, readOverview } from '../src/console/data/overview.js';
import { deadLetterGroupsSql } from '../src/console/sql/overview.js';
import { readFlow } from '../src/console/data/flow.js';
import { countDeadLetters, readDeadLetter, searchDeadLetters } from '../src/console/data/deadLetters.js';
import { listParkedKeys } from '../src/console/data/parkedKeys.js';
import type { ConsoleDeadLetterFilter } from '../src/console/model.js';
import { createRelay } from '../src/relay/relay.js';
import { ConfigError } from '../src/shared/errors.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { writeCommitted } from './helpers/outbox.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// The console's reads (src/console/data/) against real tables: every filter and page is
// checked against what the seeded rows say it must return, and the relay's per-minute
// counts and breaker state are checked as a real relay writes them.

const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function schema(prefix: string): Promise<TestSchema> {
  const db = await createTestSchema(prefix);
  cleanups.push(() => db.drop());
  return db;
}

interface Seeded {
  id: number;
  topic: string;
  key: string;
  errorName: string;
  reason: string;
  policy: 'park' | 'skip';
  at: Date;
}

/** 40 dead letters over 3 topics, 5 keys, 3 error names, 4 reasons and 40 minutes; ids not contiguous. */
async function seedDeadLetters(db: TestSchema): Promise<Seeded[]> {
  const base = Date.parse('2026-11-01T10:00:00Z');
  const rows: Seeded[] = Array.from({ length: 40 }, (_, i) => ({
    id: 1000 + i * 7,
    topic: ['orders', 'payments', 'shipments'][i % 3]!,
    key: `k${i % 5}`,
    errorName: ['MESSAGE_TOO_LARGE', 'validation:empty_key', 'INVALID_RECORD'][i % 3 === 0 ? 0 : i % 2 === 0 ? 1 : 2]!,
    reason: [`the message is ${1000 + i} bytes, over the limit`, 'the key is empty', 'Broker: Invalid Record %_', 'unknown'][i % 4]!,
    policy: i % 6 === 0 ? 'park' : 'skip',
    at: new Date(base + i * 60_000),
  }));
  await db.pool.query(
    `INSERT INTO "${db.schema}".outbox_dead_letters
       (id, message_id, topic, key, payload, payload_bytes, created_at, attempts, reason, error_name, policy, first_failed_at, dead_lettered_at)
     SELECT id, gen_random_uuid(), topic, key,
            CASE WHEN id % 2 = 0 THEN jsonb_build_object('n', id) END,
            CASE WHEN id % 2 = 1 THEN decode('00ff10', 'hex') END,
            at, 1, reason, error_name, policy, at, at
       FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
            AS u(id, topic, key, error_name, reason, policy, at)`,
    [rows.map((r) => r.id), rows.map((r) => r.topic), rows.map((r) => r.key), rows.map((r) => r.errorName), rows.map((r) => r.reason), rows.map((r) => r.policy), rows.map((r) => r.at)],
  );
  return rows;
}

/** Byte order of the UTF-8 texts: Postgres' COLLATE "C", by which the overview breaks ties. */
const bytesOrder = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** What the filter must select, by the CLI's documented semantics. */
function expected(rows: Seeded[], f: ConsoleDeadLetterFilter): number[] {
  const since = f.since ? new Date(f.since) : undefined;
  const until = f.until ? new Date(f.until) : undefined;
  return rows
    .filter(
      (r) =>
        (f.topic === undefined || r.topic === f.topic) &&
        (f.key === undefined || r.key === f.key) &&
        (f.errorName === undefined || r.errorName === f.errorName) &&
        (f.reason === undefined || r.reason.toLowerCase().includes(f.reason.toLowerCase()) || r.errorName.toLowerCase().includes(f.reason.toLowerCase())) &&
        (since === undefined || r.at >= since) &&
        (until === undefined || r.at < until) &&
        (f.policy === undefined || r.policy === f.policy),
    )
    .map((r) => r.id)
    .sort((a, b) => a - b);
}

test('integration: searchDeadLetters pages every filter by id (keyset) to exactly the matches, with a capped count; countDeadLetters caps; readDeadLetter reads one whole', async () => {
  const db = await schema('console_dl');
  const rows = await seedDeadLetters(db);
  const filters: ConsoleDeadLetterFilter[] = [
    {},
    { topic: 'payments' },
    { key: 'k3' },
    { topic: 'orders', key: 'k0' },
    { errorName: 'validation:empty_key' },
    { reason: 'BYTES' },
    { reason: '%_' },
    { reason: 'invalid_record' },
    { since: '2026-11-01T10:10:00Z', until: '2026-11-01T10:25:00Z' },
    { policy: 'park' },
    { errorName: 'MESSAGE_TOO_LARGE', topic: 'orders', since: '2026-11-01T10:20:00Z' },
    { topic: 'nothing-here' },
  ];
  for (const f of filters) {
    const want = expected(rows, f);
    const got: number[] = [];
    let afterId: number | null = null;
    for (let pages = 0; pages < 50; pages++) {
      const page = await searchDeadLetters(db.pool, db.schema, f, { afterId, limit: 4 });
      assert.deepEqual(page.matching, { count: want.length, capped: false }, `matching of ${JSON.stringify(f)}`);
      assert.ok(page.deadLetters.length <= 4);
      got.push(...page.deadLetters.map((d) => d.id));
      if (page.nextAfterId === null) break;
      assert.equal(page.nextAfterId, page.deadLetters.at(-1)!.id);
      afterId = page.nextAfterId;
    }
    assert.deepEqual(got, want, `pages of ${JSON.stringify(f)}`);
    const capped = await countDeadLetters(db.pool, db.schema, f, 3);
    assert.deepEqual(capped, want.length > 3 ? { count: 3, capped: true } : { count: want.length, capped: false }, `count of ${JSON.stringify(f)}`);
  }
  // An exactly full last page says there is no next one.
  const all = expected(rows, {});
  const full = await searchDeadLetters(db.pool, db.schema, {}, { afterId: all[all.length - 5]!, limit: 4 });
  assert.deepEqual(full.deadLetters.map((d) => d.id), all.slice(-4));
  assert.equal(full.nextAfterId, null);
  // Relative times count back from the database's clock: everything seeded is older than an hour.
  assert.equal((await searchDeadLetters(db.pool, db.schema, { since: '1h' }, { afterId: null, limit: 10 })).deadLetters.length, 0);

  const json = rows.find((r) => r.id % 2 === 0)!;
  const one = await readDeadLetter(db.pool, db.schema, json.id);
  assert.deepEqual(one?.payload, { n: json.id });
  assert.equal(one?.payloadBytes, null);
  assert.equal(one?.errorName, json.errorName);
  const bytes = await readDeadLetter(db.pool, db.schema, rows.find((r) => r.id % 2 === 1)!.id);
  assert.deepEqual(bytes?.payloadBytes, Buffer.from([0, 255, 16]));
  assert.equal(await readDeadLetter(db.pool, db.schema, 999_999), null);

  await assert.rejects(searchDeadLetters(db.pool, db.schema, { until: 'yesterday-ish' }, { afterId: null, limit: 4 }), (e: unknown) => e instanceof ConfigError && /until/.test(e.message));
  await assert.rejects(searchDeadLetters(db.pool, db.schema, {}, { afterId: null, limit: 0 }), ConfigError);
  await assert.rejects(searchDeadLetters(db.pool, 'x"; drop', {}, { afterId: null, limit: 4 }), ConfigError);
});

test('integration: listParkedKeys pages parked keys longest first with why and the rows waiting; readOverview counts, groups, relays and flow', async () => {
  const db = await schema('console_ov');
  const rows = await seedDeadLetters(db);
  const s = `"${db.schema}"`;
  // Three parked keys, parked an hour, a minute and now ago (to the millisecond, as the
  // column's default keeps them), with 3, 1 and 0 rows waiting;
  // other keys' rows: 4 unsent, 5 sent.
  const parked = [
    { topic: 'orders', key: 'k0', dl: rows[0]!, agoSeconds: 3600, waiting: 3 },
    { topic: 'payments', key: 'k1', dl: rows[6]!, agoSeconds: 60, waiting: 1 },
    { topic: 'shipments', key: 'k2', dl: rows[12]!, agoSeconds: 0, waiting: 0 },
  ];
  for (const p of parked) {
    await db.pool.query(`INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id, parked_at) VALUES ($1, $2, $3, date_trunc('milliseconds', now()) - make_interval(secs => $4))`, [p.topic, p.key, p.dl.id, p.agoSeconds]);
    for (let i = 0; i < p.waiting; i++) await db.pool.query(`INSERT INTO ${s}.outbox (topic, key, payload) VALUES ($1, $2, '{}')`, [p.topic, p.key]);
  }
  await db.pool.query(`INSERT INTO ${s}.outbox (topic, key, payload) SELECT 'other', 'x' || g, '{}' FROM generate_series(1, 9) AS g`);
  await db.pool.query(`UPDATE ${s}.outbox SET sent_at = now() WHERE id IN (SELECT id FROM ${s}.outbox WHERE topic = 'other' ORDER BY id LIMIT 5)`);

  const first = await listParkedKeys(db.pool, db.schema, { after: null, limit: 2 });
  assert.deepEqual(first.parkedKeys.map((p) => [p.topic, p.key, p.deadLetterId, p.waiting.count, p.waiting.capped]), parked.slice(0, 2).map((p) => [p.topic, p.key, p.dl.id, p.waiting, false]));
  assert.equal(first.parkedKeys[0]!.reason, parked[0]!.dl.reason);
  assert.equal(first.parkedKeys[0]!.errorName, parked[0]!.dl.errorName);
  assert.ok(first.next);
  const second = await listParkedKeys(db.pool, db.schema, { after: first.next, limit: 2 });
  assert.deepEqual(second.parkedKeys.map((p) => [p.key, p.waiting.count]), [['k2', 0]]);
  assert.equal(second.next, null);

  // Relays: one live with the breaker open holding shards 0-9 and 20, one whose heartbeat is stale.
  await db.pool.query(`INSERT INTO ${s}.outbox_relays (relay_id, application_name, lease_ttl_ms, breaker_opened_at) VALUES ('r-live', 'a', 10000, now() - interval '5 seconds')`);
  await db.pool.query(`INSERT INTO ${s}.outbox_relays (relay_id, application_name, lease_ttl_ms, heartbeat_at) VALUES ('r-stale', 'b', 1000, now() - interval '1 minute')`);
  await db.pool.query(`UPDATE ${s}.outbox_shard_leases SET owner = 'r-live' WHERE shard <= 9 OR shard = 20`);
  // Two relays' minutes: 3 and 2 minutes ago (the second both), and one 61 minutes ago (outside).
  // Minutes counted from one reading of the clock: the overview reads it again, and a minute
  // may begin in between (CI once failed here with every minute one place off).
  const base = (await db.pool.query<{ m: Date }>(`SELECT date_trunc('minute', now()) AS m`)).rows[0]!.m;
  await db.pool.query(
    `INSERT INTO ${s}.outbox_relay_minutes (minute, relay_id, sent, dead_lettered, last_id) VALUES
       ($1::timestamptz - interval '3 minutes', 'r-live', 10, 1, 100),
       ($1::timestamptz - interval '2 minutes', 'r-live', 20, 0, 130),
       ($1::timestamptz - interval '2 minutes', 'r-stale', 5, 2, 150),
       ($1::timestamptz - interval '61 minutes', 'r-live', 99, 9, 1)`,
    [base],
  );

  const o = await readOverview(db.pool, { name: 'main', schema: db.schema });
  assert.equal(o.name, 'main');
  assert.equal(o.schema, db.schema);
  assert.deepEqual(o.backlog, { count: 3 + 1 + 4, capped: false });
  assert.ok(o.oldestPendingSeconds !== null && o.oldestPendingSeconds >= 0);
  assert.deepEqual(o.parkedKeys, { count: 3, capped: false });
  assert.deepEqual(o.deadLetters.total, { count: rows.length, capped: false });
  assert.deepEqual(o.deadLetters.grouped, { count: rows.length, capped: false });
  const byReason = new Map<string, number>();
  for (const r of rows) byReason.set(`${r.errorName}|${r.reason}`, (byReason.get(`${r.errorName}|${r.reason}`) ?? 0) + 1);
  assert.deepEqual(
    o.deadLetters.byReason.map((g) => [`${g.errorName}|${g.reason}`, g.count]),
    [...byReason].sort((a, b) => b[1] - a[1] || bytesOrder(a[0].replace('|', '\u0000'), b[0].replace('|', '\u0000'))).slice(0, 20),
  );
  assert.ok(o.deadLetters.byReason.every((g, i, a) => i === 0 || a[i - 1]!.count >= g.count));
  assert.deepEqual(o.deadLetters.byTopic.map((g) => [g.topic, g.count]).sort(), [['orders', 14], ['payments', 13], ['shipments', 13]]);
  const live = o.relays.find((r) => r.relayId === 'r-live')!;
  assert.equal(live.live, true);
  assert.equal(live.breaker, 'open');
  assert.ok(live.breakerOpenedAt instanceof Date);
  assert.equal(live.shards, '0-9,20');
  assert.equal(live.shardCount, 11);
  const stale = o.relays.find((r) => r.relayId === 'r-stale')!;
  assert.deepEqual([stale.live, stale.breaker, stale.breakerOpenedAt, stale.shardCount], [false, 'unknown', null, 0]);
  assert.equal(o.unownedShards, '10-19,21-255');

  assert.equal(o.flow.length, 60);
  for (let i = 1; i < 60; i++) assert.equal(o.flow[i]!.minute.getTime() - o.flow[i - 1]!.minute.getTime(), 60_000);
  const minute = (ago: number) => o.flow.find((m) => m.minute.getTime() === base.getTime() - ago * 60_000);
  const [m3, m2, m1] = [minute(3), minute(2), minute(1)];
  assert.deepEqual([m3!.recorded, m3!.egress, m3!.deadLettered, m3!.ingress], [true, 10, 1, null], 'no mark the minute before: ingress unknown (null, not 0)');
  assert.deepEqual([m2!.recorded, m2!.egress, m2!.deadLettered, m2!.ingress], [true, 25, 2, 150 - 100], 'the highest mark of the minute against the one before');
  assert.deepEqual([m1!.recorded, m1!.egress, m1!.ingress], [false, 0, null]);
  assert.equal(o.flow.filter((m) => m.recorded).length, 2, 'the minute 61 minutes ago is outside the hour');
});

test('integration: readOverview ranks the groups in SQL: of 5,000 dead letters each with a reason of its own, at most 20 groups of each grouping leave the database, the biggest, ties in byte order', async () => {
  const db = await schema('console_groups');
  const s = `"${db.schema}"`;
  // 5,000 reasons, one dead letter each (a size in the reason, as the relay writes it),
  // and, newest, three that recur: 30, 20 and 20 times (the ties differ only in case, which a
  // locale-aware sort and byte order put in opposite orders).
  await db.pool.query(
    `INSERT INTO ${s}.outbox_dead_letters (id, message_id, topic, key, created_at, attempts, reason, error_name, policy)
     SELECT g, gen_random_uuid(), 't' || (g % 25), 'k', now(), 1,
            CASE WHEN g > 5040 THEN 'recurring' WHEN g > 5020 THEN 'b: again' WHEN g > 5000 THEN 'B: again' ELSE 'the message is ' || g || ' bytes' END,
            'MESSAGE_TOO_LARGE', 'skip'
       FROM generate_series(1, 5070) AS g`,
  );
  const { rows } = await db.pool.query<{ grouping: number }>(deadLetterGroupsSql(s), [GROUPED_DEAD_LETTERS, 20]);
  assert.ok(rows.length <= 20 + 20 + 1, `${rows.length} group rows left the database`);
  const o = await readOverview(db.pool, { name: 'main', schema: db.schema });
  assert.equal(o.deadLetters.byReason.length, 20);
  assert.deepEqual(o.deadLetters.byReason.slice(0, 3).map((g) => [g.reason, g.count]), [['recurring', 30], ['B: again', 20], ['b: again', 20]]);
  assert.ok(o.deadLetters.byReason.slice(3).every((g, i, a) => g.count === 1 && (i === 0 || bytesOrder(a[i - 1]!.reason, g.reason) < 0)));
  assert.deepEqual(o.deadLetters.byTopic.length, 20);
  assert.deepEqual(o.deadLetters.grouped, { count: GROUPED_DEAD_LETTERS, capped: true });
});

test('integration: a relay records what it published per minute (on stop) and its open breaker with its heartbeat; the console reads both', async () => {
  const db = await schema('console_relay');
  const topic = await createTopic(2);
  const ids = await writeCommitted(db, Array.from({ length: 25 }, (_, i) => ({ topic, key: `k${i % 4}`, payload: { i } })));
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), kafka: testKafka(), schema: db.schema, leaseTtlMs: 1_000 });
  cleanups.push(() => relay.abort());
  let published = 0;
  relay.on('batch', (b) => (published += b.count));
  await relay.start();
  await readTopic(topic, (m) => m.length >= 25);
  await waitFor('25 published', () => published === 25);
  await relay.stop();
  const s = `"${db.schema}"`;
  const { rows } = await db.pool.query<{ sent: number; dead_lettered: number; last_id: number; relays: number }>(
    `SELECT sum(sent)::int AS sent, sum(dead_lettered)::int AS dead_lettered, max(last_id) AS last_id, count(DISTINCT relay_id)::int AS relays FROM ${s}.outbox_relay_minutes`,
  );
  assert.deepEqual(rows[0], { sent: 25, dead_lettered: 0, last_id: Math.max(...ids), relays: 1 });

  // A broker nobody listens on: the breaker opens, and the next heartbeat says so.
  const other = await schema('console_breaker');
  await writeCommitted(other, [{ topic: 'never', key: 'k', payload: {} }]);
  const dead = new Kafka({ clientId: 'dead', brokers: ['127.0.0.1:1'], logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 200 });
  const stuck = createRelay({ producer: TEST_PRODUCER, databaseUrl: other.databaseUrl, kafkaBrokers: ['127.0.0.1:1'], kafka: dead, schema: other.schema, leaseTtlMs: 1_000, breakerFailures: 2, retryMaxDelayMs: 100 });
  cleanups.push(() => stuck.abort());
  const opened = new Promise<void>((resolve) => stuck.on('breaker', (b) => b.state === 'open' && resolve()));
  await stuck.start();
  await opened;
  const view = await waitFor('the open breaker in the overview', async () => {
    const o = await readOverview(other.pool, { name: 'other', schema: other.schema });
    return o.relays[0]?.breaker === 'open' ? o : undefined;
  }, { timeoutMs: 10_000 });
  assert.equal(view.relays[0]!.relayId, stuck.instanceId);
  assert.ok(view.relays[0]!.breakerOpenedAt! <= new Date(Date.now() + 1_000));
  assert.deepEqual(view.backlog, { count: 1, capped: false });
  await stuck.abort();
  // What the flow shows comes from the table alone, with no relay running.
  assert.equal((await readFlow(other.pool, `"${other.schema}"`)).length, 60);
});

test('integration: readOverview names the oldest open outbox writer, and the overview page shows it, escaped; none once it ended', async () => {
  const { overviewPage } = await import('../src/console/web/overviewPage.js');
  const pg = (await import('pg')).default;
  const db = await schema('consolewriter');
  const writer = new pg.Client({ connectionString: db.databaseUrl, application_name: '<b>app</b>' });
  await writer.connect();
  try {
    const { rows: me } = await writer.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    await writer.query('BEGIN');
    await writer.query(`INSERT INTO "${db.schema}".outbox (topic, key) VALUES ('t', 'open')`);
    await writer.query('SELECT pg_sleep(1.1)'); // the page names a writer open a second or more
    const o = await readOverview(db.pool, { name: 'main', schema: db.schema });
    assert.equal(o.oldestOutboxWriter?.pid, me[0]!.pid, JSON.stringify(o.oldestOutboxWriter));
    assert.equal(o.oldestOutboxWriter?.applicationName, '<b>app</b>');
    const page = String(overviewPage({ prefix: '', session: undefined, outboxCount: 1, outbox: 'main' }, o));
    assert.match(page, new RegExp(`An open transaction wrote the outbox and has not ended: pid ${me[0]!.pid} \\(&lt;b&gt;app&lt;/b&gt;, idle in transaction\\), open \\d+ s\\.`));
    assert.doesNotMatch(page, /<b>app<\/b>/);
    await writer.query('ROLLBACK');
    const after = await readOverview(db.pool, { name: 'main', schema: db.schema });
    assert.equal(after.oldestOutboxWriter, null);
    assert.doesNotMatch(String(overviewPage({ prefix: '', session: undefined, outboxCount: 1, outbox: 'main' }, after)), /An open transaction wrote the outbox/);
  } finally {
    await writer.query('ROLLBACK').catch(() => undefined);
    await writer.end();
  }
});
