import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { applyKafkajsIdleFix } from '../../src/shared/kafkajsIdleFix.js';

// The internals the fix wraps, read from a real RequestQueue of the installed kafkajs: a
// kafkajs upgrade that renames them fails here instead of bringing the 1 ms loop back.
const require = createRequire(import.meta.url);
const RequestQueue = require('kafkajs/src/network/requestQueue/index.js') as new (options: Record<string, unknown>) => {
  pending: unknown[];
  throttledUntil: number;
  throttleCheckTimeoutId: NodeJS.Timeout | null;
  scheduleCheckPendingRequests(): void;
  destroy(): void;
};
const logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
const queue = () => new RequestQueue({ instrumentationEmitter: null, maxInFlightRequests: 1, requestTimeout: 1_000, enforceRequestTimeout: true, clientId: 't', broker: 'b', logger, isConnected: () => true });

test('kafkajs: an idle connection schedules no check of its (empty) pending requests; one with requests pending or throttled still does', () => {
  assert.equal(applyKafkajsIdleFix(), true, 'the installed kafkajs has the internals the fix wraps');
  const idle = queue();
  assert.deepEqual([idle.pending.length, idle.throttledUntil], [0, -1], 'a new queue: nothing pending, not throttled');
  idle.scheduleCheckPendingRequests();
  const timer = idle.throttleCheckTimeoutId;
  // Without the fix this timer reschedules itself every 1 ms for ever: stop it either way.
  if (timer) clearTimeout(timer);
  assert.equal(timer, null, 'no timer for an idle queue (kafkajs 2.2.4 alone sets one 1 ms out, again after each)');

  const busy = queue();
  busy.pending.push({});
  busy.scheduleCheckPendingRequests();
  assert.notEqual(busy.throttleCheckTimeoutId, null, 'requests waiting: the check is scheduled');
  clearTimeout(busy.throttleCheckTimeoutId!);

  const throttled = queue();
  throttled.throttledUntil = Date.now() + 60_000;
  throttled.scheduleCheckPendingRequests();
  assert.notEqual(throttled.throttleCheckTimeoutId, null, 'throttled by the broker: the check at its end is scheduled');
  clearTimeout(throttled.throttleCheckTimeoutId!);
  assert.equal(applyKafkajsIdleFix(), true, 'applying it again changes nothing');
});
