import { OutboxError, describeError } from '../shared/errors.js';
import { abandonBatch, claimBatch, finishBatch, type BatchContext, type BatchResult, type ClaimedBatch, type Worker } from './batch.js';
import type { ClaimArguments } from './sql/claim.js';
import { floorForClaim, noteRescan, startOverDue, type ClaimFloor } from './floor.js';
import type { RelayRuntime } from './relayRuntime.js';
import type { ExactlyOnceUnit, UnitTransaction } from './exactlyOnceUnit.js';
import type { ClaimsWithin } from './claimsInTransaction.js';

// Exactly-once mode's batches of one unit, pipelined (docs/exactly-once.md, "Pipelined
// transactions"): once a batch's sends are all done and its progress final, the worker
// claims the next batch on a second connection and produces it into the unit's other
// producer's transaction while this one commits in Kafka and in Postgres:
//
//   batch 1: claim → produce ─┐→ Kafka commit → mark, COMMIT ┐
//   batch 2:                  └→ claim → produce ─────────────┴→ Kafka commit → mark, COMMIT
//
// What keeps it exactly once and in key order:
// - A batch's records reach Kafka after the previous batch's (its produce starts when the
//   previous one's sends are done), and its Kafka commit waits until the previous batch
//   committed in Kafka and in Postgres; if that one failed, this one fails before its
//   commit and rolls back (the worker then starts the unit again, which aborts its open
//   transaction). So at most one batch is in Kafka and not marked sent, and the progress
//   (written by the two producers in turn, the later one kept) names it.
// - Only behind a batch that published every row it claimed (no dead letter, no key
//   parked, no row left unsent), with the unit whole, the horizon as at its claim, and no
//   stop: otherwise the next batch is claimed after the COMMIT, as without the pipeline.
// - The next claim starts at the claim floor as it was (the previous batch has not moved
//   it yet): that batch's rows are still locked by its transaction, and SKIP LOCKED passes
//   them by (or they are sent by the time the claim reaches them).

/** Found this recently, a low-water mark serves a floor that starts over as it is. */
const LOW_WATER_MAX_AGE_MS = 1_000;

/** A batch of a unit on its way: claimed, its Kafka transaction begun. */
export interface UnitBatch {
  claimed: ClaimedBatch;
  /** Settles when the batch committed in Postgres, or failed and rolled back. */
  result: Promise<BatchResult>;
  /** Whether it was claimed and produced while the previous batch committed. */
  pipelined: boolean;
}

/**
 * The batches begun behind each worker's batches, in the order they were begun: the worker
 * runs them in that order. At most two of a worker's batches hold a connection at once (a
 * next one claims only after the batch before the one committing ended). Never reject.
 */
const nextBatches = new WeakMap<Worker, Array<Promise<UnitBatch | undefined>>>();

/** The first batch begun behind the worker's batches, if any (taken: the caller runs or drops it). */
export function takeNextUnitBatch(worker: Worker): Promise<UnitBatch | undefined> | undefined {
  return nextBatches.get(worker)?.shift();
}

export function hasNextUnitBatch(worker: Worker): boolean {
  return (nextBatches.get(worker)?.length ?? 0) > 0;
}

/**
 * After a failed batch, or at the end: let the batches begun behind it end (none of them
 * can commit behind a failed one) before the unit is started again.
 */
export async function dropNextUnitBatches(worker: Worker): Promise<void> {
  for (let next = takeNextUnitBatch(worker); next; next = takeNextUnitBatch(worker)) {
    const batch = await next;
    await batch?.result.catch(() => undefined);
  }
}

/** The claim's arguments from the relay's settings, the horizon and where the claim starts. */
export function claimArguments(rt: RelayRuntime, watermark: number, incarnation: string | undefined, shards: readonly number[], from: { floor: number; generation: string }): ClaimArguments {
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
 * Claim the worker's next batch on `shards` at its claim floor (starting it over at the
 * low-water mark when due: floor.ts): BEGIN and the claim, the transaction left open.
 */
export async function claimNext(rt: RelayRuntime, worker: Worker, ctx: BatchContext, shards: readonly number[]): Promise<ClaimedBatch> {
  const { watermark, incarnation, settled, resets } = rt.horizon;
  const floor = rt.floors.get(worker) as ClaimFloor;
  worker.lastClaimAtMs = Date.now();
  worker.rowsReturnedSeen = rt.horizon.rowsReturned;
  // A floor that starts over starts at the relay's low-water mark, found again first
  // (lowWater.ts; workers due together share one walk).
  const lowWater = startOverDue(floor, shards, resets, Date.now()) ? await rt.lowWater.refresh(rt.pool, settled, resets, Date.now(), LOW_WATER_MAX_AGE_MS) : undefined;
  const from = floorForClaim(floor, shards, resets, Date.now(), lowWater);
  const claimStartedMs = Date.now();
  const batch = await claimBatch(ctx, claimArguments(rt, watermark, incarnation, shards, from), worker.clients);
  // What a claim that started over costs now sets when the next one comes (floor.ts).
  if (from.startedOver) noteRescan(floor, Date.now() - claimStartedMs);
  return { batch, settled, resets };
}

/**
 * Publish and commit `claimed` in a transaction of `unit` (begun here), the next batch
 * begun behind it when it may be. `previousCommitted`: the previous batch's outcome, when
 * this one was begun while it committed (this one's Kafka commit waits for it).
 */
export function runUnitBatch(rt: RelayRuntime, worker: Worker, unit: ExactlyOnceUnit, base: BatchContext, claimed: ClaimedBatch, previousCommitted?: Promise<boolean>): UnitBatch {
  const transaction = unit.begin();
  let committed: Promise<boolean> | undefined;
  const result = finishBatch(unitBatchContext(rt, worker, base, transaction), claimed.batch, {
    published: (allSent) => {
      if (!allSent || !pipelineOpen(rt, worker, claimed)) return;
      const next = beginNext(rt, worker, unit, base, committed!, previousCommitted);
      const queue = nextBatches.get(worker) ?? [];
      queue.push(next);
      nextBatches.set(worker, queue);
    },
    ...(previousCommitted && {
      beforeCommit: async () => {
        if (!(await previousCommitted)) {
          throw new OutboxError("the previous batch of this unit failed: this one, begun while it committed, is rolled back and claimed again", { retriable: true });
        }
      },
    }),
  }).finally(() => transaction.end());
  // Awaited by the worker when its turn comes; until then a failure is no unhandled rejection.
  result.catch(() => undefined);
  committed = result.then(
    () => true,
    () => false,
  );
  return { claimed, result, pipelined: previousCommitted !== undefined };
}

/** Whether a batch may be begun behind `claimed` (see the top of this file). */
function pipelineOpen(rt: RelayRuntime, worker: Worker, claimed: ClaimedBatch): boolean {
  if (rt.stopping || rt.breaker.isOpen || claimed.resets !== rt.horizon.resets) return false;
  return worker.shards.every((s) => rt.membership.owned.has(s) && rt.membership.wanted.has(s));
}

/**
 * Claim the batch after one that is committing (`committing`), on another connection, and
 * publish it into the unit's other producer. Its producer and connection are those of the
 * batch before (`before`): it waits for that one to end first, and begins nothing behind a
 * batch that failed. Never rejects: a claim that failed or found nothing is simply not
 * there, and the worker claims as usual.
 */
async function beginNext(
  rt: RelayRuntime,
  worker: Worker,
  unit: ExactlyOnceUnit,
  base: BatchContext,
  committing: Promise<boolean>,
  before: Promise<boolean> | undefined,
): Promise<UnitBatch | undefined> {
  if (before !== undefined && !(await before)) return undefined;
  let claimed: ClaimedBatch;
  try {
    claimed = await claimNext(rt, worker, base, worker.shards);
  } catch (error) {
    rt.logger.debug({ worker: worker.index, err: describeError(error) }, 'claim behind a committing batch failed; the next batch is claimed after its commit');
    return undefined;
  }
  if (claimed.batch.rows.length === 0 || rt.stopping) {
    await abandonBatch(claimed.batch);
    return undefined;
  }
  try {
    return runUnitBatch(rt, worker, unit, base, claimed, committing);
  } catch (error) {
    // unit.begin() refused (both producers busy): not expected, and harmless; claim again later.
    rt.logger.warn({ worker: worker.index, err: describeError(error) }, 'could not begin a transaction behind a committing batch');
    await abandonBatch(claimed.batch);
    return undefined;
  }
}

/** A batch's context on one transaction of its unit, claiming again while the transaction interval lasts (claimsInTransaction.ts). */
function unitBatchContext(rt: RelayRuntime, worker: Worker, base: BatchContext, transaction: UnitTransaction): BatchContext {
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
      if (!transaction.roomFor(2 * batchSize)) return undefined;
      return claimArguments(rt, watermark, incarnation, shards, { floor: lastId, generation });
    },
  };
  return {
    ...base,
    send: (rows) => transaction.send(rows),
    prepareCommit: () => transaction.prepareCommit(),
    commitPublish: () => transaction.commit(),
    ...(transactionIntervalMs > 0 ? { claimsWithin } : {}),
  };
}
