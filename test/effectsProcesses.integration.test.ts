// The effect guard across crashing processes, on each store: three consumer processes
// (test/fixtures/effectConsumerProcess.ts) share a group and send notifications to an HTTP
// sink (test/helpers/effectSink.ts) through the guard, with its Idempotency-Key. Every
// notification is published twice (two messages, on different partitions, so duplicates
// race in different processes), and later replayed. Processes SIGKILL themselves inside
// the effect before the request, after the sink applied it but before the confirmation,
// and after the confirmation but before their transaction commits (the message is then
// redelivered); each one killed is replaced.
//
// What a user relies on, checked: every notification is applied; none is applied twice
// (the sink honours the key) and none is even requested twice except the ones whose
// sender died between the request and the confirmation (then once more, with the same
// key); never two requests of one key in flight at once; a killed process's reservation
// is at most reservationMs long, and is taken over only once it has expired.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createEffectGuard, type EffectGuard } from '../src/effects/guard.js';
import { effectKey } from '../src/effects/key.js';
import { postgresEffectStore } from '../src/effects/postgresStore.js';
import { redisEffectStore } from '../src/effects/redisStore.js';
import type { EffectRecord } from '../src/effects/store.js';
import { createTestSchema, DATABASE_URL, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { produce } from './helpers/consumer.js';
import { startChildConsumer, type ChildConsumer, type ChildEvent } from './helpers/childConsumer.js';
import { startEffectSink, type EffectSink } from './helpers/effectSink.js';
import { useRedis, type TestRedis } from './helpers/redis.js';
import { waitFor } from './helpers/wait.js';

const FIXTURE = new URL('./fixtures/effectConsumerProcess.ts', import.meta.url).pathname;
const RESERVATION_MS = 2_000;
const NOTIFICATIONS = 30;
const DAY_MS = 24 * 3600 * 1000;

let db: TestSchema;
let redis: TestRedis;
/** Every process started, for the clean-up (each test watches its own). */
const started: ChildConsumer[] = [];
const closers: Array<() => Promise<unknown>> = [];

before(async () => {
  db = await createTestSchema('effproc');
  redis = await useRedis();
  await db.pool.query(`CREATE TABLE "${db.schema}".effect_kills (key text, point text, PRIMARY KEY (key, point))`);
});
after(async () => {
  for (const c of started) c.process.kill('SIGKILL');
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await redis?.stop();
  await db?.drop();
});

interface Kill {
  key: string;
  point: 'in-effect' | 'after-effect' | 'after-confirm';
  pid: number;
  at: number;
  /** The key's record as the store saw it at the kill (read by the process just before it died). */
  record: EffectRecord | undefined;
}

for (const kind of ['redis', 'postgres'] as const) {
  test(`integration (${kind} store): three consumer processes, duplicates, redeliveries and SIGKILLs between reserve and confirm and after confirm: every notification applied once, none requested twice but those killed between request and confirm`, async () => {
    const sink = await startEffectSink();
    closers.push(() => sink.close());
    const topic = await createTopic(6);
    const groupId = uniqueName(`effects-${kind}`);
    const prefix = redis.prefix(`effproc-${kind}`);
    let guard: EffectGuard;
    if (kind === 'redis') guard = createEffectGuard({ store: redisEffectStore(redis.client, { prefix }), replayHorizonMs: DAY_MS, defaults: { ttlMs: DAY_MS } });
    else {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
      closers.push(() => pool.end());
      guard = createEffectGuard({ store: postgresEffectStore(pool, { schema: db.schema }), replayHorizonMs: DAY_MS, defaults: { ttlMs: DAY_MS } });
    }

    const notifications = Array.from({ length: NOTIFICATIONS }, (_, i) => ({ userId: `${kind}-u${i}`, template: i % 2 ? 'welcome' : 'receipt', version: 1 + (i % 3) }));
    const keys = notifications.map((n) => effectKey({ type: 'notif', entity: [n.userId, n.template], version: n.version }));
    const plan = { 'in-effect': [keys[2]!, keys[17]!], 'after-effect': [keys[5]!, keys[20]!], 'after-confirm': [keys[8]!, keys[23]!] };
    const env = {
      DATABASE_URL: db.databaseUrl,
      KAFKA_BROKERS: testBrokers().join(','),
      GROUP_ID: groupId,
      TOPICS: topic,
      OUTBOX_SCHEMA: db.schema,
      EFFECT_STORE: kind,
      REDIS_URL: redis.url,
      EFFECT_PREFIX: prefix,
      SINK_URL: sink.url,
      RESERVATION_MS: String(RESERVATION_MS),
      KILL_KEYS: JSON.stringify(plan),
    };
    const children: ChildConsumer[] = [];
    const events = (): ChildEvent[] => children.flatMap((c) => c.events);
    const start = (): ChildConsumer => {
      const child = startChildConsumer(env, FIXTURE);
      children.push(child);
      started.push(child);
      return child;
    };
    // Each notification twice, under different Kafka keys (so on different partitions, in different processes), interleaved.
    const sent = await produce(topic, [
      ...notifications.map((n) => ({ key: `${n.userId}/a`, value: n })),
      ...notifications.map((n) => ({ key: `${n.userId}/b`, value: n })),
    ]);
    const running = [start(), start(), start()];
    await Promise.all(running.map((c) => c.waitForEvent('started', (e) => e.event === 'started')));

    // Supervise: replace each process that kills itself, and read the key's record right after its kill.
    const kills: Kill[] = [];
    const replaced = new Set<ChildConsumer>();
    const reported = (ids: Set<string>): boolean => ids.size > 0 && [...ids].every((id) => events().some((e) => e.event === 'effect' && e.messageId === id));
    const sentIds = new Set(sent.map((m) => m.messageId as string));
    const watch = async (): Promise<boolean> => {
      for (const child of children) {
        const killing = child.events.find((e) => e.event === 'killing');
        if (!killing || replaced.has(child)) continue;
        replaced.add(child);
        kills.push({ key: killing.key, point: killing.point, pid: killing.pid, at: killing.at, record: killing.record });
        const signal = await child.exited;
        assert.equal(signal.signal, 'SIGKILL');
        start();
      }
      return sink.applied.size === NOTIFICATIONS && kills.length === 6 && reported(sentIds);
    };
    const state = (): string =>
      `${sink.applied.size}/${NOTIFICATIONS} applied, kills ${JSON.stringify(kills.map((k) => `${k.point} ${k.key}`))}, ` +
      `${[...sentIds].filter((id) => !events().some((e) => e.event === 'effect' && e.messageId === id)).length} messages not reported; ` +
      children.map((c) => `pid ${c.process.pid}: ${c.events.slice(-4).map((e) => JSON.stringify(e)).join(' ')} ${c.stderr().slice(-500)}`).join('\n');
    await waitFor('every notification applied, every kill done and replaced, every message handled', watch, { timeoutMs: 150_000, intervalMs: 25 }).catch((error: Error) => {
      throw new Error(`${error.message}\n${state()}`);
    });

    // A replay, later: the same notifications again, as new messages.
    const replay = await produce(topic, notifications.slice(0, 10).map((n) => ({ key: `${n.userId}/replay`, value: n })));
    const replayIds = new Set(replay.map((m) => m.messageId as string));
    await waitFor('the replayed messages handled', () => reported(replayIds), { timeoutMs: 60_000, intervalMs: 25 });
    const live = children.filter((c) => !replaced.has(c));
    // A replacement still starting would die of SIGTERM before it listens for it.
    await Promise.all(live.map((c) => c.waitForEvent('started', (e) => e.event === 'started')));
    const stopped = await Promise.all(live.map((c) => c.stop()));
    assert.equal(stopped.length, 3);

    const all = events().filter((e) => e.event === 'effect');
    const perKey = sink.requestsPerKey();
    // Every notification applied, requested with its own key, and recorded as done in the store.
    assert.deepEqual([...sink.applied.keys()].sort(), [...keys].sort());
    for (const key of keys) assert.equal((await guard.inspect(key))?.state, 'done', key);
    for (const r of sink.requests) {
      const n = r.body as { userId: string; template: string; version: number };
      assert.equal(r.key, effectKey({ type: 'notif', entity: [n.userId, n.template], version: n.version }), 'the Idempotency-Key is the effect key');
    }
    // Never two requests of one key at once. A key is requested again only when the process that sent the
    // earlier request was SIGKILLed before it confirmed: with one effect in flight per process, exactly
    // the planned after-effect kills.
    assert.deepEqual([...sink.mostInFlight.entries()].filter(([, n]) => n > 1), []);
    const killedPids = new Set(kills.map((k) => Number(k.pid)));
    for (const key of keys) {
      const senders = sink.requests.filter((r) => r.key === key).map((r) => Number(r.pid));
      // The last request's sender confirmed it (and reported so, unless it was killed right after confirming).
      const ranBy = all.filter((e) => e.key === key && e.status === 'ran').map((e) => Number(e.pid));
      const last = senders.at(-1) as number;
      assert.ok(ranBy.length === 1 ? ranBy[0] === last : ranBy.length === 0 && killedPids.has(last), `${key}: sent last by ${last}, ran by ${JSON.stringify(ranBy)}`);
      for (const pid of senders.slice(0, -1)) assert.ok(killedPids.has(pid), `${key}: requested again after a request by ${pid}, which was not killed before confirming`);
    }
    const twice = [...perKey.entries()].filter(([, n]) => n > 1).map(([k, n]) => `${k} ×${n}`).sort();
    assert.deepEqual(twice, plan['after-effect'].map((k) => `${k} ×2`).sort());
    // Every other delivery (duplicates, redeliveries, replays) was skipped.
    assert.ok(all.filter((e) => e.status === 'skipped' && e.reason === 'done').length >= NOTIFICATIONS + replay.length - 6, 'duplicates and replays skipped as done');
    for (const id of replayIds) assert.deepEqual(all.filter((e) => e.messageId === id).map((e) => [e.status, e.reason]), [['skipped', 'done']]);

    // The kills, each where it was planned, and what each left behind.
    assert.deepEqual(kills.map((k) => `${k.point} ${k.key}`).sort(), Object.entries(plan).flatMap(([point, ks]) => ks.map((k) => `${point} ${k}`)).sort());
    for (const k of kills) {
      if (k.point === 'after-confirm') {
        assert.equal(k.record?.state, 'done', `${k.key}: confirmed before the kill`);
        assert.ok(all.some((e) => e.key === k.key && e.status === 'skipped' && e.reason === 'done' && e.pid !== k.pid && e.at > k.at), `${k.key}: its redelivery skipped it`);
        continue;
      }
      // Between reserve and confirm: a reservation of at most reservationMs is left, taken over only once expired.
      assert.equal(k.record?.state, 'reserved', `${k.key}: reserved at the kill`);
      const reservedForMs = k.record.state === 'reserved' ? k.record.reservedForMs : NaN;
      assert.ok(reservedForMs > 0 && reservedForMs <= RESERVATION_MS, `${k.key}: the dead attempt's reservation ran ${reservedForMs} ms more`);
      const expiredAt = k.at + reservedForMs;
      const takeover = events().find((e) => e.event === 'attempt' && e.key === k.key && e.at > k.at);
      assert.ok(takeover && takeover.tookOver === true && takeover.pid !== k.pid, `${k.key}: another process took the reservation over (${JSON.stringify(takeover)})`);
      const retried = sink.requests.find((r) => r.key === k.key && r.at > k.at && Number(r.pid) !== k.pid);
      assert.ok(retried, `${k.key}: sent after the kill`);
      assert.ok(retried.at >= expiredAt - 50, `${k.key}: retried ${expiredAt - retried.at} ms before the reservation expired`);
      console.log(`measured: ${kind}: ${k.point} kill of ${k.key}: reservation left ${Math.round(reservedForMs)} ms, retried ${retried.at - k.at} ms after the kill`);
    }
  });
}
