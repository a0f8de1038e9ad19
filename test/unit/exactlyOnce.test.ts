import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeProgress, encodeProgress, progressPrefixFitting } from '../../src/relay/progress.js';
import { wantedUnitShards } from '../../src/relay/units.js';
import { transactionRetryDelayMs } from '../../src/relay/transactionRetry.js';
import { SHARD_COUNT, shardsOf } from '../../src/relay/shards.js';
import { resolveRelayOptions } from '../../src/relay/options.js';
import { ConfigError } from '../../src/shared/errors.js';
import { createRelayGroup } from '../../src/relay/relayGroup.js';
import { BatchProgress, PROGRESS_READ_CHANNEL, type UnitProducer } from '../../src/relay/exactlyOnceUnit.js';
import { TwoProducerUnit } from '../../src/relay/twoProducerUnit.js';
import { exactlyOnceNames } from '../../src/relay/exactlyOnceSetup.js';
import diagnosticsChannel from 'node:diagnostics_channel';
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

/** A unit producer that records what was asked of it (the real ones need Kafka: test/exactlyOnce.integration.test.ts). */
function recordingProducer(name: string, log: string[], startError?: Error): UnitProducer {
  let open = false;
  return {
    start: async () => {
      log.push(`${name} start`);
      if (startError) throw startError;
    },
    beginBatch: () => log.push(`${name} begin`),
    send: async (messages) => {
      open = true;
      log.push(`${name} send ${messages.map((m) => m.id).join(',')}`);
      return messages.map(() => ({ acknowledged: true }));
    },
    prepareCommit: async () => void log.push(`${name} prepare`),
    commit: async () => {
      log.push(`${name} commit${open ? '' : ' (nothing open)'}`);
      const committed = open;
      open = false;
      return committed;
    },
    roomFor: () => true,
    close: async () => void log.push(`${name} close`),
  };
}

test("a unit's transactions alternate between its two producers (a transaction that sent nothing does not take a turn), at most one in flight on each; a start fences both ids before it reads the progress", async () => {
  const log: string[] = [];
  const reads: string[] = [];
  const unit = new TwoProducerUnit(3, [recordingProducer('first', log), recordingProducer('second', log)], {
    read: async (u) => {
      reads.push(`read unit ${u} after: ${log.join('; ')}`);
      return encodeProgress([7, 9]);
    },
  });
  const message = (id: number) => ({ id, message_id: `m${id}`, topic: 't', key: 'k', value: '{}', headers: {} }) as RelayMessage;
  assert.deepEqual(await unit.start(), [7, 9], "the progress's ids");
  assert.deepEqual(reads, ['read unit 3 after: first start; second start'], 'both producers started (fenced) before the read');
  log.length = 0;
  // The next transaction begins while the previous one commits: on the other producer.
  const one = unit.begin();
  await one.send([message(1)]);
  await one.prepareCommit();
  const two = unit.begin();
  await two.send([message(2)]);
  // A third would need the first producer, still committing the first transaction.
  assert.throws(() => unit.begin(), /both producers have a transaction in flight/);
  await one.commit();
  one.end();
  const three = unit.begin();
  await two.commit();
  two.end();
  await three.commit();
  three.end();
  // The third sent nothing: the next transaction still takes the first producer's turn.
  const four = unit.begin();
  await four.send([message(4)]);
  await four.commit();
  four.end();
  const five = unit.begin();
  await five.send([message(5)]);
  await five.commit();
  five.end();
  assert.deepEqual(log, [
    'first begin', 'first send 1', 'first prepare',
    'second begin', 'second send 2',
    'first commit',
    'first begin',
    'second commit',
    'first commit (nothing open)',
    'first begin', 'first send 4', 'first commit',
    'second begin', 'second send 5', 'second commit',
  ]);
  await unit.close();
  assert.deepEqual(log.slice(-2), ['first close', 'second close']);
  await assert.rejects(unit.start(), /closed: its relay stopped/);
  assert.throws(() => unit.begin(), /closed: its relay stopped/);
});

test("a unit's start fails when either of its ids cannot be fenced, and reads no progress then (marking from it could be wrong)", async () => {
  const log: string[] = [];
  let read = 0;
  const seen: number[][] = [];
  const listener = (m: unknown) => seen.push((m as { ids: number[] }).ids);
  diagnosticsChannel.subscribe(PROGRESS_READ_CHANNEL, listener);
  try {
    const unit = new TwoProducerUnit(0, [recordingProducer('first', log), recordingProducer('second', log, new Error('PRODUCER_FENCED'))], {
      read: async () => {
        read++;
        return null;
      },
    });
    await assert.rejects(unit.start(), /PRODUCER_FENCED/);
    assert.equal(read, 0);
    assert.deepEqual(seen, []);
  } finally {
    diagnosticsChannel.unsubscribe(PROGRESS_READ_CHANNEL, listener);
  }
});

test("a unit's two transactional ids are its first (the one older relays used alone) and that with .2, under the outbox's prefix and schema", () => {
  const names = exactlyOnceNames('shop', 'public');
  assert.deepEqual(names.transactionalIds(4), ['shop.public.unit-4', 'shop.public.unit-4.2']);
  assert.equal(names.transactionalId(4), 'shop.public.unit-4');
});
