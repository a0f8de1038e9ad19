import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeProgress, encodeProgress, progressPrefixFitting } from '../../src/relay/progress.js';
import { wantedUnitShards } from '../../src/relay/units.js';
import { transactionRetryDelayMs } from '../../src/relay/transactionRetry.js';
import { SHARD_COUNT, shardsOf } from '../../src/relay/shards.js';
import { resolveRelayOptions } from '../../src/relay/options.js';
import { ConfigError } from '../../src/shared/errors.js';
import { createRelayGroup } from '../../src/relay/relayGroup.js';
import { BatchProgress } from '../../src/relay/exactlyOnceUnit.js';
import type { RelayMessage } from '../../src/relay/message.js';

// The pure parts of exactly-once delivery (docs/exactly-once.md): the progress record a
// Kafka transaction carries, the units of shards, and the options it needs.

test('a progress record gives back the ids it was made of, small and huge, and says which prefix fits a size', () => {
  for (const ids of [[], [1], [5, 6, 7, 300, 301, 70_000], [2 ** 31 + 5, 2 ** 40, Number.MAX_SAFE_INTEGER]]) {
    assert.deepEqual(decodeProgress(encodeProgress(ids)), ids);
  }
  assert.deepEqual(decodeProgress(null), []);
  assert.deepEqual(decodeProgress(''), []);
  assert.throws(() => decodeProgress('hello'), TypeError);
  assert.throws(() => encodeProgress([3, 2]), RangeError);
  // A unit's 500-row batch: ids at most about 64 apart (the most units), far below Kafka's 4,096 characters.
  const batch = Array.from({ length: 500 }, (_, i) => 10_000_000 + i * 64);
  assert.ok(encodeProgress(batch).length < 1_000, `${encodeProgress(batch).length} characters`);
  // Ids far apart take more room: the prefix that fits is what one transaction carries.
  const sparse = Array.from({ length: 1_000 }, (_, i) => i * 2 ** 40);
  const fits = progressPrefixFitting(sparse, 4_096);
  assert.ok(fits > 0 && fits < sparse.length);
  assert.ok(encodeProgress(sparse.slice(0, fits)).length <= 4_096);
  assert.ok(encodeProgress(sparse.slice(0, fits + 1)).length > 4_096);
});

test('units cut the shards into contiguous whole ranges, and relays want whole units, all of them once, for any unit count', () => {
  for (const units of [1, 2, 3, 8, 64]) {
    const cut = Array.from({ length: units }, (_, u) => shardsOf(u, units));
    assert.deepEqual(cut.flat(), Array.from({ length: SHARD_COUNT }, (_, s) => s), `${units} units: every shard once, in order`);
    assert.ok(cut.every((shards) => shards.length > 0), `${units} units: none empty`);
    const unitOf = (shard: number): number => cut.findIndex((shards) => shards.includes(shard));
    for (const n of [1, 2, 3, 5, 8, 9]) {
      const wanted = Array.from({ length: n }, (_, i) => wantedUnitShards(units)(i, n));
      assert.equal(wanted.reduce((sum, w) => sum + w.size, 0), SHARD_COUNT, `${units} units, ${n} relays: every shard wanted once`);
      for (const w of wanted) for (const s of w) assert.ok(cut[unitOf(s)]!.every((t) => w.has(t)), `${units} units, ${n} relays: units stay whole`);
    }
  }
});

test('exactly-once units default to 2 and take 1 to 64, refused outside with the flag named', () => {
  const base = { databaseUrl: 'postgres://localhost/db', kafkaBrokers: ['localhost:9092'], delivery: 'exactly-once' as const, transactionalIdPrefix: 'orders' };
  assert.equal(resolveRelayOptions(base).exactlyOnceUnits, 2);
  assert.equal(resolveRelayOptions({ ...base, exactlyOnceUnits: 1 }).exactlyOnceUnits, 1);
  assert.equal(resolveRelayOptions({ ...base, exactlyOnceUnits: 64 }).exactlyOnceUnits, 64);
  for (const bad of [0, 65, 2.5]) assert.throws(() => resolveRelayOptions({ ...base, exactlyOnceUnits: bad }), (e: Error) => e instanceof ConfigError && /exactlyOnceUnits/.test(e.message), String(bad));
});

test('exactly-once delivery takes either client, the default one included, and refuses a missing transactional id prefix, naming what to set', () => {
  const base = { databaseUrl: 'postgres://localhost/db', kafkaBrokers: ['localhost:9092'], delivery: 'exactly-once' as const };
  for (const producer of ['platformatic', 'kafkajs', undefined] as const) {
    assert.throws(
      () => resolveRelayOptions({ ...base, ...(producer ? { producer } : {}) }),
      (e: Error) => e instanceof ConfigError && /transactionalIdPrefix: is required with delivery exactly-once \(--transactional-id-prefix/.test(e.message),
    );
  }
  assert.equal(resolveRelayOptions({ ...base, transactionalIdPrefix: 'orders' }).producer, 'platformatic', "the default client's exactly-once");
  assert.throws(() => resolveRelayOptions({ ...base, producer: 'kafkajs', transactionalIdPrefix: 'no spaces' }), ConfigError);
  const ok = resolveRelayOptions({ ...base, producer: 'kafkajs', transactionalIdPrefix: 'orders-db' });
  assert.equal(ok.delivery, 'exactly-once');
  assert.equal(ok.transactionTimeoutMs, 30_000);
  assert.equal(resolveRelayOptions({ databaseUrl: base.databaseUrl, kafkaBrokers: base.kafkaBrokers }).delivery, 'at-least-once');
});

test('the transaction interval defaults to 100 ms, takes 0 (one claim per transaction), and is refused above half the transaction timeout or below 0, naming both settings', () => {
  const base = { databaseUrl: 'postgres://localhost/db', kafkaBrokers: ['localhost:9092'], delivery: 'exactly-once' as const, transactionalIdPrefix: 'orders' };
  assert.equal(resolveRelayOptions(base).transactionIntervalMs, 100);
  assert.equal(resolveRelayOptions({ ...base, transactionIntervalMs: 0 }).transactionIntervalMs, 0);
  assert.equal(resolveRelayOptions({ ...base, transactionIntervalMs: 5_000, transactionTimeoutMs: 10_000 }).transactionIntervalMs, 5_000);
  assert.throws(
    () => resolveRelayOptions({ ...base, transactionIntervalMs: 6_000, transactionTimeoutMs: 10_000 }),
    (e: Error) => e instanceof ConfigError && /transactionIntervalMs: \(6000\) must be at most half of --transaction-timeout-ms \(10000\)/.test(e.message),
  );
  assert.throws(() => resolveRelayOptions({ ...base, transactionIntervalMs: -1 }), ConfigError);
});

test('a relay group refuses two exactly-once outboxes in different databases with one schema name (one prefix: the same transactional ids), naming both; other schemas, or at-least-once, pass', () => {
  const group = (outboxes: Array<{ name: string; databaseUrl: string; schema: string; delivery?: 'at-least-once' | 'exactly-once' }>) =>
    createRelayGroup({ outboxes, kafkaBrokers: ['127.0.0.1:9'], producer: 'kafkajs', delivery: 'exactly-once', transactionalIdPrefix: 'shop' });
  const orders = { name: 'orders', databaseUrl: 'postgres://relay@orders-db:5432/orders', schema: 'public' };
  const billing = { name: 'billing', databaseUrl: 'postgres://relay@billing-db:5432/billing', schema: 'public' };
  assert.throws(
    () => group([orders, billing]),
    (e: unknown) =>
      e instanceof ConfigError &&
      e.setting === 'outbox billing' &&
      /is exactly-once in schema public, as outbox orders is, under one transactional id prefix: both would use the transactional ids shop\.public\.unit-N and fence each other/.test(e.message),
  );
  assert.doesNotThrow(() => group([orders, { ...billing, schema: 'billing' }]));
  assert.doesNotThrow(() => group([orders, { ...billing, delivery: 'at-least-once' }]));
});

test("the @platformatic/kafka unit retries a transaction's requests soon at first (CONCURRENT_TRANSACTIONS lasts milliseconds), doubling to at most 1 s", () => {
  const delays = Array.from({ length: 12 }, (_, i) => transactionRetryDelayMs(undefined, 'addPartitionsToTransaction', i + 1));
  assert.deepEqual(delays.slice(0, 4), [2, 4, 8, 16]);
  assert.equal(Math.max(...delays), 1_000);
  const total = delays.reduce((a, b) => a + b, 0);
  assert.ok(total > 2_000 && total < 5_000, `all retries take ${total} ms: a broker's short absence is ridden out, a long one fails the batch`);
});

test("a transaction's progress has room for another full claim only while one would fit offset.metadata.max.bytes, so a batch stops claiming before rows would wait for nothing", () => {
  const progress = new BatchProgress(4_096);
  assert.ok(progress.roomFor(500), 'an empty transaction has room');
  const claim = (from: number, n: number): RelayMessage[] =>
    Array.from({ length: n }, (_, i) => ({ id: from + i * 2, message_id: `m${from + i * 2}`, topic: 't', key: `k${i}`, value: '{}', headers: {} }));
  const counts = new Map([['t', 6]]);
  // Claims of 500 ids 2 apart (a unit of 2): each takes about 670 characters of the record.
  let next = 1_000_000;
  let claims = 0;
  while (progress.roomFor(500)) {
    const planned = progress.plan(claim(next, 500), counts);
    assert.equal(planned.sending.length, 500, `claim ${claims + 1} fits whole when roomFor said so`);
    progress.added({ batch: planned.batch, groups: planned.groups });
    next += 1_000;
    claims++;
  }
  assert.ok(claims >= 4 && claims <= 6, `${claims} claims of 500 fit one record of 4,096 characters`);
  assert.ok(encodeProgress([...progress.progress]).length <= 4_096);
  // One more claim would not all fit: roomFor said no in time.
  assert.ok(progress.plan(claim(next, 500), counts).sending.length < 500, 'another claim would not have fitted');
  progress.reset();
  assert.ok(progress.roomFor(500), 'a new transaction has room again');
});
