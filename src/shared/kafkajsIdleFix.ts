/**
 * kafkajs 2.2.4 (its last release) keeps every idle connection busy: after each check of a
 * connection's pending requests it schedules the next one at `throttledUntil - now`, which
 * is negative when nothing is throttled, so Node runs it 1 ms later, forever (kafkajs issues
 * #1704 and #1751, fixes proposed and never released). An idle producer or consumer spends
 * about 4 % of a core on it, and Node 24 prints a TimeoutNegativeWarning for it.
 *
 * Loaded once by every module that makes kafkajs clients, this skips that schedule when the
 * connection has nothing pending and is not throttled: there is then nothing to check, and a
 * new request is sent or queued (and a check scheduled) by kafkajs' own push. kafkajs is
 * pinned to 2.2.4 (package.json), so the internals wrapped here do not move; the unit test
 * test/unit/kafkajsIdleFix.test.ts fails if they do. The patch is on kafkajs' prototype, so
 * it also covers kafkajs clients the application makes itself from the same copy.
 */
import { createRequire } from 'node:module';

interface RequestQueueInternals {
  pending: unknown[];
  throttledUntil: number;
  scheduleCheckPendingRequests(): void;
}

const PATCHED = Symbol.for('outbox-relay.kafkajsIdleFix');

/** Whether the running kafkajs has the internals this fix wraps (false: left as it was). */
export function applyKafkajsIdleFix(): boolean {
  const require = createRequire(import.meta.url);
  let RequestQueue: { prototype: RequestQueueInternals & { [PATCHED]?: true } };
  try {
    RequestQueue = require('kafkajs/src/network/requestQueue/index.js') as typeof RequestQueue;
  } catch {
    return false;
  }
  const proto = RequestQueue.prototype;
  if (proto[PATCHED]) return true;
  const schedule = proto.scheduleCheckPendingRequests;
  if (typeof schedule !== 'function') return false;
  proto.scheduleCheckPendingRequests = function scheduleUnlessIdle(this: RequestQueueInternals): void {
    if (this.pending.length === 0 && !(this.throttledUntil > Date.now())) return;
    schedule.call(this);
  };
  proto[PATCHED] = true;
  return true;
}

applyKafkajsIdleFix();
