import type pg from 'pg';
import { horizonProbeSql, type HorizonProbeRow } from './sql/horizon.js';

/**
 * The visibility horizon: the highest outbox id at or below which no row can still
 * appear. Claiming only below it is what keeps each key's rows in id order even when the
 * writers' transactions commit out of id order.
 *
 * Why it holds. Every insert takes its transaction id before its outbox id (the CASE in
 * the id default, sql/001_outbox.sql). A probe reads the sequence's last value L, and a
 * later probe's snapshot gives X, the first transaction id not yet handed out. Every
 * transaction holding an id <= L took its transaction id before L was read, so before X:
 * once a snapshot's xmin reaches X, all of them have committed or rolled back, and the
 * rows with id <= L are final. Each probe pairs the previous probe's L with its own X.
 *
 * A long transaction anywhere in the database holds xmin back and so the horizon. A pair
 * older than `maxWaitMs` is taken anyway (counted in `forcedAdvances`): order may then
 * break for a row whose transaction is still open, and only for it.
 */
export class Horizon {
  /** Highest id known to be final; claims use `id <= watermark`. */
  watermark = 0;
  /** Times a pair was taken before its transactions had all finished. */
  forcedAdvances = 0;
  private previousLastId: number | undefined;
  private pending: Array<{ lastId: number; xmax: bigint; atMs: number }> = [];
  private readonly sql: string;

  constructor(
    quotedSchema: string,
    private readonly maxWaitMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.sql = horizonProbeSql(quotedSchema);
  }

  /**
   * Run one probe on `client` (outside any transaction of ours, so that it holds no
   * transaction id of its own) and advance the watermark.
   *
   * @returns true when the watermark moved
   */
  async probe(client: pg.Pool | pg.ClientBase): Promise<boolean> {
    const { rows } = await client.query<HorizonProbeRow>(this.sql);
    const row = rows[0];
    if (!row) return false;
    return this.advance(BigInt(row.xmin), BigInt(row.xmax), Number(row.last_id));
  }

  /** The pure part of probe(), separate so it can be tested without a database. */
  advance(xmin: bigint, xmax: bigint, lastId: number): boolean {
    const before = this.watermark;
    if (this.previousLastId !== undefined && this.previousLastId > this.watermark) {
      const last = this.pending[this.pending.length - 1];
      if (last && last.xmax === xmax) last.lastId = Math.max(last.lastId, this.previousLastId);
      else this.pending.push({ lastId: this.previousLastId, xmax, atMs: this.now() });
    }
    this.previousLastId = lastId;
    const now = this.now();
    while (this.pending.length > 0) {
      const head = this.pending[0]!;
      if (head.xmax <= xmin) {
        this.watermark = Math.max(this.watermark, head.lastId);
      } else if (now - head.atMs >= this.maxWaitMs) {
        this.watermark = Math.max(this.watermark, head.lastId);
        this.forcedAdvances++;
      } else {
        break;
      }
      this.pending.shift();
    }
    return this.watermark > before;
  }

  /** Whether rows may exist above the watermark that a later probe will release. */
  get hasPending(): boolean {
    return this.pending.length > 0 || (this.previousLastId ?? 0) > this.watermark;
  }

  /** Age of the oldest pair still waiting for its transactions, in ms (0 when none). */
  oldestWaitMs(): number {
    const head = this.pending[0];
    return head ? this.now() - head.atMs : 0;
  }
}
