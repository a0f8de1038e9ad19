// The effect guard's options are validated up front, before any store is touched: a
// ConfigError names the option, and a TTL shorter than the replay horizon is refused (no
// server needed: the store here is a plain object whose every method fails the test).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createEffectGuard } from '../../src/effects/guard.js';
import { resolveGuardOptions } from '../../src/effects/options.js';
import type { EffectGuardOptions } from '../../src/effects/options.js';
import type { EffectStore } from '../../src/effects/store.js';
import { effectMetricNames } from '../../src/effects/metrics.js';
import { redisEffectStore } from '../../src/effects/redisStore.js';
import { postgresEffectStore } from '../../src/effects/postgresStore.js';
import { EffectKeyError } from '../../src/effects/errors.js';
import { ConfigError } from '../../src/shared/errors.js';

const untouched = (): never => assert.fail('the store must not be touched');
const store: EffectStore = { kind: 'none', reserve: untouched, renew: untouched, confirm: untouched, release: untouched, inspect: untouched, forget: untouched };
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

test('effect guard options: defaults (14-day TTL, 30 s reservations, waits as long as a reservation lives)', () => {
  const o = resolveGuardOptions({ store, replayHorizonMs: DAY });
  assert.deepEqual(o.defaults, { ttlMs: 14 * DAY, reservationMs: 30_000, waitMs: 30_000, onBusy: 'wait', inDoubt: 'retry' });
  assert.equal(o.name, 'default');
  assert.equal(resolveGuardOptions({ store, replayHorizonMs: DAY, defaults: { reservationMs: 500 } }).defaults.waitMs, 500);
});

test('effect guard options: a TTL shorter than replayHorizonMs is a ConfigError, in the defaults and in each call', async () => {
  assert.throws(
    () => createEffectGuard({ store, replayHorizonMs: 3 * DAY, defaults: { ttlMs: HOUR } }),
    (e) => e instanceof ConfigError && e.setting === 'defaults.ttlMs' && /1h is shorter than replayHorizonMs \(3d\)/.test(e.message),
  );
  // The default TTL (14 days) against a horizon of 30 days.
  assert.throws(() => createEffectGuard({ store, replayHorizonMs: 30 * DAY }), (e) => e instanceof ConfigError && e.setting === 'defaults.ttlMs');
  const guard = createEffectGuard({ store, replayHorizonMs: 3 * DAY, defaults: { ttlMs: 7 * DAY } });
  await assert.rejects(guard.once('k', () => 1, { ttlMs: HOUR }), (e) => e instanceof ConfigError && e.setting === 'once.ttlMs' && !e.retriable);
});

test('effect guard options: without replayHorizonMs, a default TTL under 7 days is warned about once; at 7 days or with a horizon, not', async () => {
  const warnings: Array<Error & { code?: string }> = [];
  const listen = (w: Error): void => void warnings.push(w);
  process.on('warning', listen);
  try {
    createEffectGuard({ store, name: 'short', defaults: { ttlMs: HOUR } });
    createEffectGuard({ store, defaults: { ttlMs: 7 * DAY } });
    createEffectGuard({ store, replayHorizonMs: HOUR, defaults: { ttlMs: HOUR } });
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', listen);
  }
  const ours = warnings.filter((w) => w.code === 'OUTBOX_EFFECT_TTL');
  assert.equal(ours.length, 1);
  assert.match(ours[0]!.message, /effect guard "short": defaults\.ttlMs is 1h, under 7 days .* Set replayHorizonMs/);
});

test('effect guard options: a bad value is a ConfigError naming the option, and nothing touches the store', async () => {
  const cases: Array<[() => unknown, string]> = [
    [() => createEffectGuard({} as EffectGuardOptions), 'store'],
    [() => createEffectGuard({ store: { reserve() {} } as unknown as EffectStore }), 'store'],
    [() => createEffectGuard({ store, name: 'Has Spaces' }), 'name'],
    [() => createEffectGuard({ store, registry: {} as Registry }), 'registry'],
    [() => createEffectGuard({ store, replayHorizonMs: 0 }), 'replayHorizonMs'],
    [() => createEffectGuard({ store, replayHorizon: DAY } as object as EffectGuardOptions), 'replayHorizon'],
    [() => createEffectGuard({ store, defaults: { ttlMs: 10 } }), 'defaults.ttlMs'],
    [() => createEffectGuard({ store, defaults: { ttlMs: 1.5 * DAY + 0.5 } }), 'defaults.ttlMs'],
    [() => createEffectGuard({ store, defaults: { reservationMs: 50 } }), 'defaults.reservationMs'],
    [() => createEffectGuard({ store, defaults: { ttlMs: 1_000, reservationMs: 2_000 } }), 'defaults.ttlMs'],
    [() => createEffectGuard({ store, defaults: { waitMs: -1 } }), 'defaults.waitMs'],
    [() => createEffectGuard({ store, defaults: { onBusy: 'drop' as 'skip' } }), 'defaults.onBusy'],
    [() => createEffectGuard({ store, defaults: { inDoubt: 'ignore' as 'fail' } }), 'defaults.inDoubt'],
    [() => createEffectGuard({ store, defaults: { ttl: DAY } as object }), 'defaults.ttl'],
    [() => redisEffectStore({} as never), 'redisEffectStore.client'],
    [() => redisEffectStore({ sendCommand: async () => null }, { timeoutMs: 0 }), 'redisEffectStore.timeoutMs'],
    [() => redisEffectStore({ sendCommand: async () => null }, { prefx: 'a' } as object), 'redisEffectStore.prefx'],
    [() => postgresEffectStore({} as never), 'postgresEffectStore.pool'],
  ];
  for (const [make, setting] of cases) {
    assert.throws(make, (e) => e instanceof ConfigError && e.setting === setting && !e.retriable, `expected a ConfigError for ${setting}`);
  }
  const guard = createEffectGuard({ store, replayHorizonMs: HOUR });
  await assert.rejects(guard.once('k', () => 1, { waitMs: 'soon' as unknown as number }), (e) => e instanceof ConfigError && e.setting === 'once.waitMs');
  await assert.rejects(guard.once('', () => 1), EffectKeyError);
  await assert.rejects(guard.once('a\u0000b', () => 1), EffectKeyError);
  await assert.rejects(guard.once('x'.repeat(513), () => 1), EffectKeyError);
  await assert.rejects(guard.once('k', 'not a function' as never), TypeError);
});

test('effectMetricNames lists the guard metrics', () => {
  assert.deepEqual(effectMetricNames().sort(), [
    'outbox_effect_duration_seconds', 'outbox_effect_reservations_total', 'outbox_effect_runs_total', 'outbox_effect_skips_total',
    'outbox_effect_store_errors_total', 'outbox_effect_waits_total',
  ]);
});
