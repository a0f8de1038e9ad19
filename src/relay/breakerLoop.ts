import { describeError } from '../shared/errors.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import type { RelayRuntime } from './relayRuntime.js';

/**
 * While the breaker is closed the loop sleeps until it opens (the worker that opens it
 * notifies) or a stop begins (which notifies too); this timeout only bounds a missed
 * notification. It was 1 s: an idle relay woke every second for nothing.
 */
const CLOSED_CHECK_MS = 60_000;

/** While the breaker is open: probe the broker with backoff; close it when it answers. */
export async function runBreakerLoop(rt: RelayRuntime): Promise<void> {
  let probes = 0;
  while (!rt.stopping) {
    if (!rt.breaker.isOpen) {
      probes = 0;
      await rt.breakerOpened.wait(CLOSED_CHECK_MS);
      continue;
    }
    await rt.sleep(backoffDelayMs(probes++, 250, Math.min(rt.options.retryMaxDelayMs, 5_000)) + 250);
    if (rt.stopping) break;
    const admin = rt.kafka.admin();
    try {
      await guardLibraryCall('kafkajs', 'admin.connect', () => admin.connect());
      await guardLibraryCall('kafkajs', 'admin.describeCluster', () => admin.describeCluster());
      rt.breaker.probeSucceeded();
      rt.logger.info({ probes }, 'Kafka answers again: circuit breaker closed, claiming resumes');
      rt.emit('breaker', { state: 'closed' });
      rt.workAvailable.notify();
    } catch (error) {
      rt.logger.debug({ err: describeError(error), probes }, 'Kafka still unreachable');
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }
}
