import { shardCountOf, shardsOf } from './shards.js';
import type { Worker } from './batch.js';

// One worker at a trickle, all of them under a backlog.
//
// Why. Each worker claims and publishes its own shards' rows on every horizon move. At a
// steady trickle that is one small batch per worker per move: twice the transactions,
// marks and produce requests of one worker doing the same rows, for no gain in latency
// (bench/batchesInFlight.ts, docs/benchmarks.md History 2026-12-02 16:12: one batch in
// flight took 0.86 x the CPU per row at 1,000 rows/s, with a lower p50 and p99; but 0.89 x
// the drain rate). So a worker whose batches keep coming in below the batch size hands
// its shards to worker 0, and worker 0 hands every worker its own shards back at its
// first full batch.
//
// Order. A key never has two batches in flight because a shard belongs to one worker at
// a time and moves only between that worker's batches: a worker hands its shards over at
// the top of its loop, its last batch committed and none claimed ahead; worker 0 hands
// them back likewise, and claims nothing ahead while it holds others' shards. The worker
// that takes a shard claims it from the start of the unsent-row index (its claim floor
// starts over with a new shard set, floor.ts) and at once (drainedTo reset), so rows the
// other worker had not claimed yet are not left waiting for a horizon move.

/** Batches in a row below the batch size (empty claims included) before a worker hands its shards to worker 0. */
export const SMALL_BATCHES_BEFORE_HANDOVER = 50;

/** Count a committed or empty claim of `claimed` rows towards a handover. */
export function noteBatch(worker: Worker, claimed: number, batchSize: number): void {
  worker.smallBatches = claimed < batchSize ? worker.smallBatches + 1 : 0;
}

/** Whether worker 0 holds shards of other workers (so a full batch of it means a backlog). */
export function holdsOthersShards(worker: Worker, count: number): boolean {
  return worker.index === 0 && count > 1 && worker.shards.length > shardCountOf(0, count);
}

/**
 * Called at the top of `worker`'s loop, between its batches, with none claimed ahead:
 * hands its shards to worker 0 once its batches have come in small long enough. True if
 * it did.
 */
export function handOverIfQuiet(workers: readonly Worker[], worker: Worker): boolean {
  if (worker.index === 0 || worker.shards.length === 0 || worker.ahead) return false;
  if (worker.smallBatches < SMALL_BATCHES_BEFORE_HANDOVER) return false;
  const first = workers[0]!;
  first.shards = [...first.shards, ...worker.shards].sort((a, b) => a - b);
  first.drainedTo = 0;
  worker.shards = [];
  worker.smallBatches = 0;
  return true;
}

/**
 * Called at the top of worker 0's loop, between its batches, with none claimed ahead,
 * after a full batch while it held others' shards: every worker gets its own shards back.
 */
export function handBack(workers: readonly Worker[]): void {
  for (const w of workers) {
    w.shards = shardsOf(w.index, workers.length);
    w.drainedTo = 0;
    w.smallBatches = 0;
  }
}
