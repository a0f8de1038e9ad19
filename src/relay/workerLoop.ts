import { describeError } from '../shared/errors.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { preparedStatementsLost } from './poolerProbe.js';
import { PublishError } from './publishBatch.js';
import { abandonBatch, claimBatch, finishBatch, type BatchContext, type BatchResult, type ClaimedBatch, type Worker } from './batch.js';
import type { ClaimArguments } from './sql/claim.js';
import { kafkaTimestampMs } from './message.js';
import { FLOOR_RESCAN_MS, advanceFloor, floorAhead, floorForClaim, noteRescan, startOverDue, type ClaimFloor } from './floor.js';
import { RETRY_BASE_MS, type RelayRuntime } from './relayRuntime.js';
import { ProgressFullError, type ExactlyOnceUnit } from './exactlyOnceUnit.js';
import { handBack, handOverIfQuiet, holdsOthersShards, noteBatch } from './workerShards.js';
import { startUnit } from './unitStart.js';
import type { ClaimsWithin } from './claimsInTransaction.js';

/** Idle workers look again this often even when the horizon did not move, to pick up
 *  rows that a failed batch or another transaction's lock left behind; after each recheck
 *  that found nothing the wait doubles, up to RECHECK_MAX_MS. Rows skipped as locked sit
 *  below the worker's claim floor until its rescan (floor.ts, every 10 s) in any case,
 *  so a longer idle recheck delays nothing the rescan would not; it saves an idle relay two
 *  transactions a second. The ceiling is that rescan's interval (FLOOR_RESCAN_MS): at 5 s
 *  each worker of an idle relay still ran a claim transaction every 5 s for nothing the
 *  rescan would not find as soon (issue 34, idle cost). */
const RECHECK_MS = 1_000;
const RECHECK_MAX_MS = FLOOR_RESCAN_MS;

/** A low-water mark found this recently serves a floor that starts over as it is. */
const LOW_WATER_MAX_AGE_MS = 1_000;

/**
 * One worker: claims and publishes batches of its shards (batch.ts) when the horizon
 * moved or a recheck is due, retries failed batches with backoff, counts them towards the
 * circuit breaker, and reports what each committed batch did as the relay's events.
 *
 * Claim ahead: while a full batch is being published (Kafka's acknowledgement is about
 * half of a batch's time when draining a backlog), the worker claims its next batch on a
 * second connection, so Postgres and Kafka work at once. The batch claimed ahead is
 * published only after the previous one committed, so a key's rows still reach Kafka one
 * batch after the other, in id order; and it is kept only when the previous batch
 * committed every row it claimed as sent (floor.ts: its claim starts where that commit
 * puts the floor). Anything else (a failure, a dead letter, a row left unsent, a key
 * parked, the shards or the horizon changed, a stop) rolls it back unpublished and the
 * next claim starts afresh. A batch that was not full claims nothing ahead: at a steady
 * trickle the worker runs one transaction at a time, as before.
 */
export async function runWorkerLoop(rt: RelayRuntime, worker: Worker): Promise<void> {
  try {
    await workerLoop(rt, worker);
  } finally {
    await dropAhead(worker);
  }
}

async function workerLoop(rt: RelayRuntime, worker: Worker): Promise<void> {
  // Exactly-once mode: this worker's unit, whose shards never move to another worker.
  const unit = rt.units?.[worker.index];
  const ctx = batchContext(rt, worker, unit);
  while (!rt.stopping) {
    // Between this worker's batches: shards may move to or from worker 0 (workerShards.ts).
    // Logged at info the first time per worker (the fault suite's report counts these
    // lines), then at debug: a trickle between bursts moves shards often.
    if (unit) {
      // Units stay whole: no shard moves.
    } else if (worker.handBackDue && !worker.ahead) {
      worker.handBackDue = false;
      handBack(rt.workers);
      rt.logger[worker.loggedShardMoves.has('back') ? 'debug' : 'info']({ worker: worker.index }, 'shards handed back: a full batch, every worker takes its own shards again (a backlog)');
      worker.loggedShardMoves.add('back');
      rt.workAvailable.notify();
    } else if (handOverIfQuiet(rt.workers, worker)) {
      rt.logger[worker.loggedShardMoves.has('over') ? 'debug' : 'info']({ worker: worker.index }, 'shards handed to worker 0: small batches (a trickle)');
      worker.loggedShardMoves.add('over');
      rt.workAvailable.notify();
    }
    const { watermark, incarnation, settled, resets } = rt.horizon;
    const held = worker.shards.filter((s) => rt.membership.owned.has(s));
    const unwanted = held.filter((s) => !rt.membership.wanted.has(s));
    // A unit is published only when the relay holds all of it (its producer fences the
    // others'); it must be started again whenever the relay held less.
    const shards = unit && held.length < worker.shards.length ? [] : held;
    if (unit && shards.length === 0) worker.unitReady = false;
    const ahead = worker.ahead;
    if (ahead && (unwanted.length > 0 || rt.breaker.isOpen || ahead.resets !== resets || !sameShards(ahead.batch.claim.shards, shards))) {
      await dropAhead(worker);
      continue;
    }
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
    const returned = rt.horizon.rowsReturned;
    const sinceClaimMs = Date.now() - worker.lastClaimAtMs;
    // Before the horizon first releases ids (at start, after a reset) a claim, bounded by
    // the watermark, can find nothing; and its floor would start over before the low-water
    // mark can be found (it never passes the settled id), so its first real claim would walk
    // from 0 every index entry a snapshot held open elsewhere keeps.
    const due =
      ahead !== undefined || (watermark > 0 && !rt.breaker.isOpen && shards.length > 0 && (moved || returned > worker.rowsReturnedSeen || sinceClaimMs >= recheckMs));
    if (!due) {
      await rt.workAvailable.wait(Math.max(1, recheckMs - sinceClaimMs));
      continue;
    }
    if (unit && !worker.unitReady && !(await startUnit(rt, worker, unit, shards))) {
      if (rt.stopping) break;
      worker.failures++;
      await rt.sleepOrDatabaseBack(backoffDelayMs(worker.failures, RETRY_BASE_MS, rt.options.retryMaxDelayMs));
      continue;
    }
    let result: BatchResult;
    let current: ClaimedBatch;
    const floor = rt.floors.get(worker) as ClaimFloor;
    try {
      worker.ahead = undefined;
      if (ahead) current = ahead;
      else {
        worker.lastClaimAtMs = Date.now();
        worker.rowsReturnedSeen = returned;
        // A floor that starts over starts at the relay's low-water mark, found again first
        // (lowWater.ts; workers due together share one walk).
        const lowWater = startOverDue(floor, shards, resets, Date.now())
          ? await rt.lowWater.refresh(rt.pool, settled, resets, Date.now(), LOW_WATER_MAX_AGE_MS)
          : undefined;
        const from = floorForClaim(floor, shards, resets, Date.now(), lowWater);
        const claimStartedMs = Date.now();
        current = { batch: await claimBatch(ctx, claimArguments(rt, watermark, incarnation, shards, from), worker.clients), settled, resets };
        // What a claim that started over costs now sets when the next one comes (floor.ts).
        if (from.startedOver) noteRescan(floor, Date.now() - claimStartedMs);
      }
      // Exactly-once mode claims again inside the batch's transaction instead (claimsInTransaction.ts).
      const next = !unit && claimsAhead(rt, worker, current) ? claimAhead(rt, ctx, worker, current, floor) : undefined;
      result = await finishBatch(ctx, current.batch).catch(async (error: unknown) => {
        await settleAhead(rt, worker, next, undefined);
        throw error;
      });
      await settleAhead(rt, worker, next, result);
    } catch (error) {
      // Its Kafka transaction may have committed: start the unit again before the next claim.
      worker.unitReady = false;
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
    const { claim, generation } = current.batch;
    advanceFloor(floor, {
      shards: claim.shards,
      horizonResets: current.resets,
      generation,
      watermark: claim.watermark,
      settled: current.settled,
      batchSize: rt.options.batchSize,
      claimed: result.floorRows,
      done: new Set([...result.published.map((r) => r.id), ...result.deadLetters.map((d) => d.row.id)]),
      parkedKeys: new Set(result.deadLetters.filter((d) => d.policy === 'park').map((d) => `${d.row.topic}\u0000${d.row.key}`)),
    });
    if (result.claimed < rt.options.batchSize) worker.drainedTo = claim.watermark;
    noteBatch(worker, result.claimed, rt.options.batchSize);
    if (result.claimed >= rt.options.batchSize && holdsOthersShards(worker, rt.workers.length)) worker.handBackDue = true;
    // A recheck (the horizon had not moved) that found nothing: wait longer for the next.
    worker.emptyRechecks = result.claimed === 0 && !moved ? worker.emptyRechecks + 1 : 0;
    if (result.claimed > 0) batchCommitted(rt, worker, result, ahead !== undefined);
  }
}

/** Whether to claim the next batch while `current` is published: only behind a full batch that saw all its shards leased. */
function claimsAhead(rt: RelayRuntime, worker: Worker, current: ClaimedBatch): boolean {
  const { rows, generation } = current.batch;
  // Worker 0 holding others' shards hands them back after this batch: nothing ahead on them.
  if (holdsOthersShards(worker, rt.workers.length)) return false;
  return rows.length >= rt.options.batchSize && generation !== undefined && !rt.stopping && !rt.breaker.isOpen;
}

/**
 * Claim the batch after `current` on another connection (see runWorkerLoop). Never
 * throws: a claim that failed is simply not there, and the next batch is claimed as usual.
 */
async function claimAhead(rt: RelayRuntime, ctx: BatchContext, worker: Worker, current: ClaimedBatch, floor: ClaimFloor): Promise<ClaimedBatch | undefined> {
  const { watermark, incarnation, settled, resets } = rt.horizon;
  const { claim, rows, generation } = current.batch;
  if (resets !== current.resets) return undefined;
  // Ahead, the last mark found (it still holds: the claim compares its generation).
  const from = floorAhead(floor, { shards: claim.shards, horizonResets: resets, generation: generation!, lastId: rows[rows.length - 1]!.id, settled: current.settled }, Date.now(), rt.lowWater.current(resets));
  try {
    worker.lastClaimAtMs = Date.now();
    const batch = await claimBatch(ctx, claimArguments(rt, watermark, incarnation, claim.shards, from), worker.clients);
    if (from.startedOver) noteRescan(floor, Date.now() - worker.lastClaimAtMs);
    return { batch, settled, resets };
  } catch (error) {
    rt.logger.debug({ worker: worker.index, err: describeError(error) }, 'claim ahead failed; the next batch is claimed after this one');
    return undefined;
  }
}

/** Keep the batch claimed ahead for the next round when `finished` committed every row it claimed as sent; else roll it back. */
async function settleAhead(rt: RelayRuntime, worker: Worker, next: Promise<ClaimedBatch | undefined> | undefined, finished: BatchResult | undefined): Promise<void> {
  const claimed = await next;
  if (!claimed) return;
  if (finished && allSent(finished) && !rt.stopping) worker.ahead = claimed;
  else await abandonBatch(claimed.batch);
}

/** Roll back the batch claimed ahead, if any. */
async function dropAhead(worker: Worker): Promise<void> {
  const ahead = worker.ahead;
  worker.ahead = undefined;
  if (ahead) await abandonBatch(ahead.batch);
}

/** A committed batch that published every row it claimed: nothing left behind, no key parked. */
function allSent(result: BatchResult): boolean {
  return result.claimed > 0 && result.published.length === result.claimed;
}

function sameShards(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((s, i) => s === b[i]);
}

function claimArguments(rt: RelayRuntime, watermark: number, incarnation: string | undefined, shards: readonly number[], from: { floor: number; generation: string }): ClaimArguments {
  return {
    watermark,
    shards,
    batchSize: rt.options.batchSize,
    relayId: rt.instanceId,
    incarnation: incarnation ?? '-infinity',
    floor: from.floor,
    generation: from.generation,
  };
}

/**
 * What a batch needs from the relay; in exactly-once mode it publishes through the worker's
 * unit, one Kafka transaction per batch, which claims again while the interval lasts.
 */
function batchContext(rt: RelayRuntime, worker: Worker, unit: ExactlyOnceUnit | undefined): BatchContext {
  const { batchSize, onPublish, transactionIntervalMs } = rt.options;
  const claimsWithin: ClaimsWithin = {
    quotedSchema: rt.quotedSchema,
    onPublish,
    batchSize,
    next: (lastId, generation, startedAtMs) => {
      const { watermark, incarnation, resets } = rt.horizon;
      const shards = worker.shards.filter((s) => rt.membership.owned.has(s) && rt.membership.wanted.has(s));
      // The unit whole, the horizon as at the batch's claim, time left, no stop: else commit now.
      if (rt.stopping || rt.breaker.isOpen || shards.length < worker.shards.length || resets !== rt.floors.get(worker)?.horizonResets) return undefined;
      if (Date.now() - startedAtMs >= transactionIntervalMs) return undefined;
      // A full claim more must fit the transaction's progress record (offset.metadata.max.bytes),
      // beside the claim still being published (claimsInTransaction.ts claims the next one
      // while the previous one's rows go out, before they are in the record).
      if (unit && !unit.roomFor(2 * batchSize)) return undefined;
      return claimArguments(rt, watermark, incarnation, shards, { floor: lastId, generation });
    },
  };
  return {
    pool: rt.pool,
    quotedSchema: rt.quotedSchema,
    instanceId: rt.instanceId,
    options: rt.options,
    send: unit ? (rows) => unit.send(rows) : (rows) => rt.producer.send(rows),
    ...(rt.encoding && { encode: rt.encoding.encode }),
    ...(unit ? { beginPublish: () => unit.beginBatch(), commitPublish: () => unit.commit() } : {}),
    ...(unit && transactionIntervalMs > 0 ? { claimsWithin } : {}),
    aborted: () => rt.aborted,
    inline: () => rt.inlineStatements,
  };
}

/** After COMMIT, outside the batch's error handling: listeners cannot undo a batch. */
function batchCommitted(rt: RelayRuntime, worker: Worker, result: BatchResult, claimedAhead: boolean): void {
  rt.breaker.success();
  const { published, deadLetters } = result;
  if (result.unsent.length > 0) {
    // A full progress record (exactly-once) is the mode working as designed: not a warning.
    const full = result.unsentError instanceof ProgressFullError;
    rt.logger[full ? 'debug' : 'warn'](
      { worker: worker.index, unsent: result.unsent.length, firstId: result.unsent[0]!.id, err: describeError(result.unsentError) },
      full
        ? "rows left unsent for the next batch: the Kafka transaction's progress record is full"
        : 'rows left unsent for now (their partition or topic is not available); the rest of the batch committed, a later batch retries them',
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
  if ((claimedAhead || result.claims > 1) && !worker.loggedClaimAhead) {
    // Once per worker: that the pipeline runs (the fault suite's self-check counts these lines).
    worker.loggedClaimAhead = true;
    rt.logger.info(
      { worker: worker.index, count: published.length, claims: result.claims },
      claimedAhead
        ? 'claiming ahead: this batch was claimed while the previous one was published (a backlog)'
        : "claiming ahead: this batch's Kafka transaction took several claims, each claimed while the previous one was published (a backlog, exactly-once mode)",
    );
  }
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
    claimedAhead,
  });
}
