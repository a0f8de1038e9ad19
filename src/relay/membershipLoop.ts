import { describeError } from '../shared/errors.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { RETRY_BASE_MS, type RelayRuntime } from './relayRuntime.js';

/**
 * The lease loop: renews this relay's shard leases every third of the lease TTL and takes
 * or gives shards as relays come and go (membership.ts). When renewal fails for longer
 * than the TTL the relay drops its shards, so it never claims rows another relay owns.
 * It also writes the relay's per-minute counts (flowRecorder.ts) once a minute has ended.
 */
export async function runMembershipLoop(rt: RelayRuntime): Promise<void> {
  const intervalMs = Math.max(100, Math.floor(rt.options.leaseTtlMs / 3));
  let failures = 0;
  let lastSuccessMs = Date.now();
  while (!rt.stopping) {
    let delay = intervalMs;
    try {
      const client = await rt.pool.connect();
      let broken: Error | undefined;
      // See claimBatch (batch.ts): a connection dropped between two queries emits 'error'.
      const onError = (error: Error): void => {
        broken ??= error;
      };
      client.on('error', onError);
      let change;
      try {
        change = await rt.membership.tick(client);
        // The per-minute counts ride on the lease loop's connection, about once a minute; a
        // failed write keeps them for the next round and never fails the lease renewal.
        if (rt.flow.due) {
          await rt.flow.write(client).catch((error: unknown) => {
            rt.logger.warn({ err: describeError(error) }, 'could not record the per-minute counts; retried next round');
          });
        }
      } catch (error) {
        broken ??= error as Error;
        throw error;
      } finally {
        client.off('error', onError);
        client.release(broken);
      }
      failures = 0;
      lastSuccessMs = Date.now();
      if (change.acquired.length > 0 || change.lost.length > 0) {
        // New shards may hold rows below the current watermark: look again.
        for (const w of rt.workers) w.drainedTo = 0;
        rt.logger.info(
          { owned: rt.membership.owned.size, acquired: change.acquired.length, lost: change.lost.length, liveRelays: change.liveRelays },
          'shard ownership changed',
        );
        rt.emit('shards', { owned: rt.membership.owned.size, ...change });
        rt.workAvailable.notify();
      }
    } catch (error) {
      if (Date.now() - lastSuccessMs > rt.options.leaseTtlMs) rt.membership.dropAll();
      delay = Math.min(intervalMs, backoffDelayMs(failures++, RETRY_BASE_MS, rt.options.retryMaxDelayMs) + RETRY_BASE_MS);
      rt.logger.warn({ err: describeError(error), retryInMs: delay }, 'shard lease renewal failed');
    }
    await rt.sleepOrDatabaseBack(delay);
  }
}
