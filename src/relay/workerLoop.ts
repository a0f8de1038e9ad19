import { describeError } from '../shared/errors.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { preparedStatementsLost } from './poolerProbe.js';
import { PublishError } from './publishBatch.js';
import { runBatch, type BatchResult, type Worker } from './batch.js';
import { kafkaTimestampMs } from './message.js';
import { advanceFloor, floorForClaim, type ClaimFloor } from './floor.js';
import { RETRY_BASE_MS, type RelayRuntime } from './relayRuntime.js';

/** Idle workers look again this often even when the horizon did not move, to pick up
 *  rows that a failed batch or another transaction's lock left behind; after each recheck
 *  that found nothing the wait doubles, up to RECHECK_MAX_MS. Rows skipped as locked sit
 *  below the worker's claim floor until its rescan (floor.ts, every 10 s) in any case,
 *  so a longer idle recheck delays nothing the rescan would not; it saves an idle relay two
 *  transactions a second. */
const RECHECK_MS = 1_000;
const RECHECK_MAX_MS = 5_000;

/**
 * One worker: claims and publishes batches of its shards (batch.ts) when the horizon
 * moved or a recheck is due, retries failed batches with backoff, counts them towards the
 * circuit breaker, and reports what each committed batch did as the relay's events.
 */
export async function runWorkerLoop(rt: RelayRuntime, worker: Worker): Promise<void> {
  while (!rt.stopping) {
    const { watermark, incarnation, settled, resets } = rt.horizon;
    const shards = worker.shards.filter((s) => rt.membership.owned.has(s));
    const unwanted = shards.filter((s) => !rt.membership.wanted.has(s));
    if (unwanted.length > 0) {
      // Between two batches of this worker: none of these shards has a batch in flight.
      try {
        await rt.membership.release(rt.pool, unwanted);
        rt.logger.info({ worker: worker.index, released: unwanted.length }, 'released shards to rebalance');
      } catch (error) {
        rt.logger.warn({ err: describeError(error) }, 'could not release shards; retrying');
        await rt.sleep(RETRY_BASE_MS * 10);
      }
      continue;
    }
    const recheckMs = Math.min(RECHECK_MAX_MS, RECHECK_MS * 2 ** Math.min(8, worker.emptyRechecks));
    const moved = watermark > worker.drainedTo;
    const sinceClaimMs = Date.now() - worker.lastClaimAtMs;
    const due = !rt.breaker.isOpen && shards.length > 0 && (moved || sinceClaimMs >= recheckMs);
    if (!due) {
      await rt.workAvailable.wait(Math.max(1, recheckMs - sinceClaimMs));
      continue;
    }
    let result: BatchResult;
    const floor = rt.floors.get(worker) as ClaimFloor;
    try {
      result = await runBatch(batchContext(rt), worker, watermark, incarnation, shards, floorForClaim(floor, shards, resets, Date.now()));
    } catch (error) {
      if (rt.aborted) break;
      if (error instanceof PublishError && rt.breaker.failure()) {
        rt.logger.warn(
          { err: describeError(error), failuresToOpen: rt.options.breakerFailures },
          'Kafka keeps refusing batches: circuit breaker open, claiming paused until a probe reaches it',
        );
        rt.emit('breaker', { state: 'open' });
        rt.breakerOpened.notify();
      }
      if (preparedStatementsLost(error)) rt.preparedStatementsLost(error);
      const retryInMs = backoffDelayMs(worker.failures, RETRY_BASE_MS, rt.options.retryMaxDelayMs);
      worker.failures++;
      rt.logger.warn(
        { worker: worker.index, attempt: worker.failures, retryInMs, err: describeError(error) },
        'batch failed; rolled back, will retry',
      );
      rt.emit('batchError', { worker: worker.index, error: error as Error, attempt: worker.failures, retryInMs });
      await rt.sleepOrDatabaseBack(retryInMs);
      continue;
    }
    worker.failures = 0;
    advanceFloor(floor, {
      shards,
      horizonResets: resets,
      generation: worker.claimGeneration,
      watermark,
      settled,
      batchSize: rt.options.batchSize,
      claimed: worker.claimedRows,
      done: new Set([...result.published.map((r) => r.id), ...result.deadLetters.map((d) => d.row.id)]),
      parkedKeys: new Set(result.deadLetters.filter((d) => d.policy === 'park').map((d) => `${d.row.topic}\u0000${d.row.key}`)),
    });
    if (result.claimed < rt.options.batchSize) worker.drainedTo = watermark;
    // A recheck (the horizon had not moved) that found nothing: wait longer for the next.
    worker.emptyRechecks = result.claimed === 0 && !moved ? worker.emptyRechecks + 1 : 0;
    if (result.claimed > 0) batchCommitted(rt, worker, result);
  }
}

/** What runBatch needs from the relay. */
function batchContext(rt: RelayRuntime): Parameters<typeof runBatch>[0] {
  return {
    pool: rt.pool,
    quotedSchema: rt.quotedSchema,
    instanceId: rt.instanceId,
    options: rt.options,
    send: (rows) => rt.producer.send(rows),
    aborted: () => rt.aborted,
    inline: () => rt.inlineStatements,
  };
}

/** After COMMIT, outside the batch's error handling: listeners cannot undo a batch. */
function batchCommitted(rt: RelayRuntime, worker: Worker, result: BatchResult): void {
  rt.breaker.success();
  const { published, deadLetters } = result;
  if (result.unsent.length > 0) {
    rt.logger.warn(
      { worker: worker.index, unsent: result.unsent.length, firstId: result.unsent[0]!.id, err: describeError(result.unsentError) },
      'rows left unsent for now (their partition or topic is not available); the rest of the batch committed, a later batch retries them',
    );
  }
  for (const d of deadLetters) {
    rt.logger.error(
      { id: d.row.id, topic: d.row.topic, errorName: d.errorName, reason: d.reason, policy: d.policy },
      d.policy === 'park' ? "row moved to the dead letters; its key's later rows wait for it" : 'row moved to the dead letters',
    );
    rt.emit('deadLetter', { id: d.row.id, topic: d.row.topic, errorName: d.errorName, reason: d.reason, policy: d.policy });
  }
  if (published.length === 0) return;
  const topics: Record<string, number> = {};
  for (const r of published) topics[r.topic] = (topics[r.topic] ?? 0) + 1;
  rt.emit('batch', {
    worker: worker.index,
    count: published.length,
    firstId: published[0]!.id,
    lastId: published[published.length - 1]!.id,
    durationMs: Date.now() - result.startedAtMs,
    topics,
    createdAtMs: published.flatMap((r) => kafkaTimestampMs(r.created_at) ?? []),
    ackedAtMs: result.ackedAtMs,
    claimMs: result.claimMs,
    publishMs: result.publishMs,
    markMs: result.markMs,
  });
}
