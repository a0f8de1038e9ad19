// The effect guard when its Redis hangs mid-effect (a private redis-server, SIGSTOPped:
// connections open, nothing answered; never the shared Redis): the holder cannot renew,
// so it gives its reservation up when the reservation could have expired (its signal is
// aborted then), and a confirmation the store does not answer leaves once() resolving
// { confirmed: false } after its tries, counted as unconfirmed, instead of hanging or
// throwing for an effect that did happen.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createClient } from 'redis';
import { createEffectGuard } from '../src/effects/guard.js';
import { EffectReservationLostError } from '../src/effects/errors.js';
import { redisEffectStore } from '../src/effects/redisStore.js';
import { metricValue } from './helpers/metrics.js';
import { startPrivateRedis } from './helpers/redis.js';
import { waitFor } from './helpers/wait.js';

const DAY_MS = 24 * 3600 * 1000;
const RESERVATION_MS = 600;
const TIMEOUT_MS = 200;
/** Scheduling on a loaded 2-core machine, on top of a bound. */
const SLACK_MS = 700;

const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

test('redis hung mid-effect: the holder aborts its signal once its reservation could have expired unrenewed; the confirmation gets no answer and once resolves confirmed: false', async () => {
  const server = await startPrivateRedis();
  cleanups.push(() => server.stop('SIGKILL'));
  const client = createClient({ url: server.url });
  client.on('error', () => undefined);
  await client.connect();
  cleanups.push(async () => client.destroy());
  const registry = new Registry();
  const guard = createEffectGuard({
    store: redisEffectStore(client, { timeoutMs: TIMEOUT_MS }),
    registry,
    name: 'away',
    replayHorizonMs: DAY_MS,
    defaults: { ttlMs: DAY_MS, reservationMs: RESERVATION_MS },
  });
  const metric = (name: string, labels: Record<string, string>): Promise<number> => metricValue(registry, `outbox_effect_${name}`, { guard: 'away', ...labels });

  let reservedAt = 0;
  let abortedAfterMs = NaN;
  const result = await guard.once('notif:away:1', async ({ signal }) => {
    reservedAt = performance.now();
    server.pause();
    // The effect carries on regardless (it ignores the signal): it did happen.
    await waitFor('the abort', () => signal.aborted, { intervalMs: 5, timeoutMs: 10_000 });
    abortedAfterMs = performance.now() - reservedAt;
    return signal.reason as Error;
  });
  server.resume();
  assert.equal(result.status, 'ran');
  assert.ok(result.status === 'ran' && result.value instanceof EffectReservationLostError, 'the signal said why');
  assert.match((result.value as Error).message, /no renewal reached the store within reservationMs \(600 ms\)/);
  assert.equal(result.confirmed, false);
  console.log(`measured: signal aborted ${Math.round(abortedAfterMs)} ms into the effect (reservationMs ${RESERVATION_MS})`);
  assert.ok(abortedAfterMs <= RESERVATION_MS + SLACK_MS, `aborted ${abortedAfterMs} ms in`);
  assert.ok(abortedAfterMs >= RESERVATION_MS - 3 * TIMEOUT_MS, `not before the renewals had had their chance (${abortedAfterMs} ms)`);
  assert.equal(await metric('reservations_total', { result: 'lost' }), 1);
  // A renewal was sent before the abort (its timer is due first), and its failure is
  // counted when its own timeout ends, which on a loaded box can be after once() returned.
  await waitFor('the failed renewal counted', async () => (await metric('store_errors_total', { operation: 'renew' })) >= 1, { intervalMs: 20, timeoutMs: 10_000 });
  assert.equal(await metric('store_errors_total', { operation: 'confirm' }), 3);
  assert.equal(await metric('runs_total', { outcome: 'unconfirmed' }), 1);
  // Answering again, Redis carries out what was already sent to it: the key is reserved (to expire) or, if a confirmation given up on landed, done.
  const record = await guard.inspect('notif:away:1');
  assert.ok(record?.state === 'reserved' || record?.state === 'done', JSON.stringify(record));
});
