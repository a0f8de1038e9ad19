// The relay's low-water mark: where a worker's floor starts over (floor.ts) instead of 0.
//
// Why. A worker's floor starts over every FLOOR_RESCAN_MS (longer when that is slow, at
// most FLOOR_RESCAN_MAX_MS), to find rows its claims skipped because another transaction
// held them locked. From 0, under a snapshot held open elsewhere (a 30-minute report),
// that claim walked every index entry published since the snapshot, each with its heap
// tuple: at 2,000 rows/s, 4,377 buffer hits and 2,191 reads per claim on average ten
// minutes into the hold, 26 s of Postgres time per 30 s against 1 s without the hold
// (bench/committed/held-horizon-leases-2026-12-05). Starting from the mark, it walks
// what was published since the mark was last found.
//
// The invariant. A mark M under generation G and horizon reset count R means: every row
// with id <= M is sent or deleted, moved to the dead letters, or belongs to a parked key
// (what a worker's floor means, for every shard at once). It is found by one statement
// (sql/lowWater.ts) that reads G and walks the unsent-row index from the last mark (from
// 0 under another generation) to the first unsent row of no parked key at or below the
// settled id read before it, locked rows included; M is that row's id - 1, or the settled
// id when there is none. Every row at or below the settled id is committed or rolled
// back before that statement's snapshot, so it saw them all. After it, a row comes back
// at or below M only through a replay, a key released or a partition attached again,
// which bump the generation (sql/005_claim_floors.sql): a claim started from M under G
// compares G in its own snapshot and starts from 0 when it moved (sql/claim.ts). A
// horizon reset (a restart, a sequence set back) drops the mark.
import type pg from 'pg';
import { BATCH_SETTINGS_SQL } from './sql/claim.js';
import { lowWaterSql, type LowWaterRow } from './sql/lowWater.js';

/** A worker's floor may start over here instead of at 0 (see above). */
export interface LowWater {
  id: number;
  /** outbox_claim_floors.generation it was found under, as text. */
  generation: string;
  /** Horizon.resets when it was found. */
  horizonResets: number;
}

export class LowWaterMark {
  private mark: LowWater | undefined;
  private foundAtMs = Number.NEGATIVE_INFINITY;
  private finding: Promise<LowWater | undefined> | undefined;

  constructor(private readonly quotedSchema: string) {}

  /** The last mark found, if it holds for `horizonResets`. */
  current(horizonResets: number): LowWater | undefined {
    return this.mark?.horizonResets === horizonResets ? this.mark : undefined;
  }

  /**
   * The mark, found again first unless it was found less than `maxAgeMs` ago (workers
   * whose rescans fall due together share one walk). A failed walk keeps the last mark
   * (it still holds: the claim checks its generation) and is logged by the caller's next
   * claim failing, if the database is gone.
   */
  async refresh(pool: pg.Pool, settled: number, horizonResets: number, nowMs: number, maxAgeMs: number): Promise<LowWater | undefined> {
    if (this.finding) return await this.finding;
    if (nowMs - this.foundAtMs < maxAgeMs) return this.current(horizonResets);
    this.finding = this.find(pool, settled, horizonResets)
      .then((found) => {
        this.mark = found;
        this.foundAtMs = nowMs;
        return found;
      })
      .catch(() => this.current(horizonResets))
      .finally(() => {
        this.finding = undefined;
      });
    return await this.finding;
  }

  private async find(pool: pg.Pool, settled: number, horizonResets: number): Promise<LowWater> {
    const last = this.current(horizonResets);
    // Above the settled id rows may still commit: the mark never passes it.
    const from = last && last.id <= settled ? last : { id: 0, generation: '-1' };
    const client = await pool.connect();
    let results: pg.QueryResult[];
    try {
      results = (await client.query(lowWaterSql(this.quotedSchema, BATCH_SETTINGS_SQL, from.id, from.generation, settled))) as unknown as pg.QueryResult[];
    } catch (error) {
      // A statement that failed left its transaction open and aborted: never back to the pool.
      client.release(true);
      throw error;
    }
    client.release();
    const row = results.find((r) => r.command === 'SELECT')!.rows[0] as LowWaterRow;
    const id = row.first_unsent === null ? settled : Number(row.first_unsent) - 1;
    return { id, generation: row.generation, horizonResets };
  }
}
