// Claim floors: where a worker's next claim may start scanning the unsent-row index.
//
// Why. A claim walks the unsent-row index in id order from its lower bound. A row
// published (marked or deleted) leaves a dead entry there that Postgres may not remove
// while any snapshot older than the change is open (a REPEATABLE READ report, a pg_dump:
// such a reader takes no transaction id, so the horizon does not wait for it). Scanning
// from the lowest id, each claim walked every entry published since that snapshot, and a
// 1,000,000-row drain ran at 0.30 x its speed without the reader. Starting past what the
// worker has already dealt with keeps each claim's walk about one batch long.
//
// The invariant. For a worker, a floor F with generation G and shard set S means: every
// row of a shard in S with id <= F is sent or deleted, moved to the dead letters, or
// belongs to a parked key; so a claim may look only at ids above F. Why it holds:
//
// - The claim returns the lowest eligible ids in (F, watermark] in id order, of the shards
//   it holds a lease on when it runs. Only a claim that returned rows and saw every shard
//   of S leased (all_leased, same statement snapshot as its lease check) moves the floor:
//   a lapsed lease (a late renewal; the relay still counts the shard as its own and renews
//   it) would have its shard's rows skipped, and an empty claim cannot say which it was.
//   When such a claim returns a full batch ending at id M, every eligible row in (F, M]
//   is in it; when it returns fewer, every eligible row up to the watermark is. (The fault
//   suite found the first version, which moved the floor over a lapsed shard: its rows
//   went out ten seconds late, after newer rows of their keys.) After COMMIT each of those
//   rows is sent, deleted, dead-lettered, or behind a key the batch parked. So the new
//   floor is M (full batch) or the watermark, lowered below every claimed row that none
//   of that covers (rows left unsent for a reason that may pass, rows held behind a key
//   that is not parked). A batch that fails moves nothing.
// - Rows below the floor that commit late: the claim's snapshot sees every row at or
//   below Horizon.settled (all their transactions had finished before the probe that
//   settled them, and the claim's snapshot is later). The floor never rises above the
//   settled id read before the claim. After a forced release (--horizon-max-wait-ms) the
//   watermark runs ahead of `settled`, and rows between them may still appear: the floor
//   stays below them until their transactions are gone.
// - Rows that come back under an old id (a replayed dead letter) and keys released from
//   parking (replay, discard, or any delete on the two tables): the triggers of
//   sql/005_claim_floors.sql bump the generation in that same transaction, and a claim
//   under another generation than its floor's scans from 0. The claim compares the
//   generation in its own statement snapshot, the one it reads rows in: it sees both the
//   released key and the bump, or neither. The floor it produces carries the generation
//   the claim read in that same snapshot (sql/claim.ts returns it with the rows): a
//   release or replay the claim did not see bumps it past that value, so the next claim
//   scans from 0; one it saw is in the rows the floor was computed from.
//   A partition attached again is the exception: a statement may read the bump with a
//   plan made before the ATTACH, without the partition, so the pass bumps once more after
//   every transaction that held the outbox through the ATTACH has ended
//   (partitionReattach.ts).
// - Another shard set (shards acquired, taken over, released), a horizon reset (a
//   Postgres restart, a sequence set back), a relay restart (floors live in memory): the
//   floor starts over (where: next item).
// - Rows skipped because another transaction held their lock (SKIP LOCKED, the safety net
//   under fencing) would sit below the floor: every FLOOR_RESCAN_MS (longer when such a
//   rescan is slow: FLOOR_RESCAN_MAX_MS) the floor starts over, as the old code did on
//   every claim: at the relay's low-water mark (lowWater.ts), below which every row of
//   every shard is done or parked, locked rows counted as unsent, under the generation it
//   was found in (the claim compares it as it compares a floor's); at 0 without one. The
//   other start-overs below take the mark as well: it holds for any shard set.
// - A claim made ahead, while the worker's previous batch is still being published
//   (workerLoop.ts), starts where that batch's commit will put the floor: that batch was a
//   full batch ending at M that saw every shard leased, so every eligible row up to M is
//   in it, and it starts from min(M, settled) under the generation that batch's claim
//   read ({@link floorAhead}). The claim ahead is kept only when the previous batch then
//   committed every row it claimed as sent; otherwise it is rolled back unpublished, so
//   it never stands on a floor that did not come true.

import type { LowWater } from './lowWater.js';

/** How often a worker's floor starts over anyway (see above: rows skipped as locked), at the least. */
export const FLOOR_RESCAN_MS = 10_000;

/**
 * The rescan's interval grows with what it costs: a claim from 0 walks every index entry
 * published since the oldest open snapshot, and under a long-held horizon (a 30-minute
 * report at 2,000 rows/s leaves 3.6 million) one such walk takes seconds; from the
 * low-water mark it walks those since the mark was found, unless a row stuck unsent (its
 * shard's relay gone, a lock held for minutes) holds the mark down. The next rescan
 * comes RESCAN_COST_FACTOR times the last rescan's duration later (at most 2 % of
 * the worker's time), never sooner than FLOOR_RESCAN_MS nor later than FLOOR_RESCAN_MAX_MS:
 * a row skipped as locked waits that long at most.
 */
export const FLOOR_RESCAN_MAX_MS = 300_000;
const RESCAN_COST_FACTOR = 50;

/** A generation no claim ever reads: the claim then scans from 0. */
const NO_GENERATION = '-1';

export interface ClaimFloor {
  /** Rows of `shardsKey`'s shards with id <= floor need no claim. */
  floor: number;
  /** outbox_claim_floors.generation the floor holds under. */
  generation: string;
  /** The shards it holds for, sorted and joined. */
  shardsKey: string;
  /** Horizon.resets when it was computed. */
  horizonResets: number;
  /** When it last started over (ms since epoch). */
  startedOverAtMs: number;
  /** How long after that it starts over again ({@link noteRescan}). */
  rescanEveryMs: number;
}

export function newClaimFloor(): ClaimFloor {
  return { floor: 0, generation: NO_GENERATION, shardsKey: '', horizonResets: -1, startedOverAtMs: 0, rescanEveryMs: FLOOR_RESCAN_MS };
}

/** A claim that started over took `claimMs`: the next rescan comes after {@link RESCAN_COST_FACTOR} times that (see FLOOR_RESCAN_MAX_MS). */
export function noteRescan(f: ClaimFloor, claimMs: number): void {
  f.rescanEveryMs = Math.min(FLOOR_RESCAN_MAX_MS, Math.max(FLOOR_RESCAN_MS, RESCAN_COST_FACTOR * claimMs));
}

const keyOf = (shards: readonly number[]): string => [...shards].sort((a, b) => a - b).join(',');

/** Whether the next claim on `shards` starts the floor over (the shard set or the horizon changed, or the rescan is due). */
export function startOverDue(f: ClaimFloor, shards: readonly number[], horizonResets: number, nowMs: number): boolean {
  return f.shardsKey !== keyOf(shards) || f.horizonResets !== horizonResets || nowMs - f.startedOverAtMs >= f.rescanEveryMs;
}

/**
 * The floor and generation to pass to the next claim on `shards`, and whether it started
 * over (at `lowWater` when it holds for this horizon, else at 0) because the shard set or
 * the horizon changed, or the rescan is due.
 */
export function floorForClaim(
  f: ClaimFloor,
  shards: readonly number[],
  horizonResets: number,
  nowMs: number,
  lowWater?: LowWater,
): { floor: number; generation: string; startedOver: boolean } {
  const startedOver = startOverIfDue(f, shards, horizonResets, nowMs, lowWater);
  return { floor: f.floor, generation: f.generation, startedOver };
}

/** Start the floor over when {@link startOverDue}; true if it did. */
function startOverIfDue(f: ClaimFloor, shards: readonly number[], horizonResets: number, nowMs: number, lowWater: LowWater | undefined): boolean {
  if (!startOverDue(f, shards, horizonResets, nowMs)) return false;
  const start = lowWater?.horizonResets === horizonResets ? lowWater : undefined;
  f.floor = start?.id ?? 0;
  f.generation = start?.generation ?? NO_GENERATION;
  f.shardsKey = keyOf(shards);
  f.horizonResets = horizonResets;
  f.startedOverAtMs = nowMs;
  return true;
}

/**
 * The floor for a claim made while the worker's previous batch (a full batch whose claim
 * saw every shard leased, `generation` its claim's, `lastId` its last row) is still in
 * flight: what that batch's commit will make the floor (see the invariant at the top), or
 * where the floor starts over when it does.
 */
export function floorAhead(
  f: ClaimFloor,
  previous: { shards: readonly number[]; horizonResets: number; generation: string; lastId: number; settled: number },
  nowMs: number,
  lowWater?: LowWater,
): { floor: number; generation: string; startedOver: boolean } {
  if (startOverIfDue(f, previous.shards, previous.horizonResets, nowMs, lowWater)) return { floor: f.floor, generation: f.generation, startedOver: true };
  return { floor: Math.min(previous.lastId, previous.settled), generation: previous.generation, startedOver: false };
}

/** What a committed batch tells the floor. Ids are those of the claim, in id order. */
export interface CommittedClaim {
  shards: readonly number[];
  horizonResets: number;
  /** Generation the claim read, in its own statement snapshot. */
  generation: string | undefined;
  watermark: number;
  /** Horizon.settled read before the claim. */
  settled: number;
  batchSize: number;
  claimed: ReadonlyArray<{ id: number; topic: string; key: string }>;
  /** Ids sent (marked or deleted) and ids moved to the dead letters. */
  done: ReadonlySet<number>;
  /** `topic\0key` of the keys this batch parked. */
  parkedKeys: ReadonlySet<string>;
}

/** Raise the floor after a committed batch (see the invariant at the top). */
export function advanceFloor(f: ClaimFloor, c: CommittedClaim): void {
  // A change since the claim started the floor over; this claim's result is for another set.
  if (c.generation === undefined || f.shardsKey !== keyOf(c.shards) || f.horizonResets !== c.horizonResets) return;
  let next = c.claimed.length >= c.batchSize ? c.claimed[c.claimed.length - 1]!.id : c.watermark;
  for (const row of c.claimed) {
    if (row.id > next) break;
    if (!c.done.has(row.id) && !c.parkedKeys.has(`${row.topic}\u0000${row.key}`)) {
      next = row.id - 1;
      break;
    }
  }
  // Lower is always safe (a longer walk); the claim itself checked the floor it started from.
  f.floor = Math.min(next, c.settled);
  f.generation = c.generation;
}
