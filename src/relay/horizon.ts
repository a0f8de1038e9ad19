import type pg from 'pg';
import { connect } from '../shared/database.js';
import { horizonProbeSql, lsnToBigInt, type HorizonProbeRow } from './sql/horizon.js';

/** A connection for {@link Horizon.probe}: read-only, outside any transaction. */
export async function openProbeConnection(databaseUrl: string, applicationName: string): Promise<pg.Client> {
  return connect(databaseUrl, applicationName);
}

/**
 * The visibility horizon: the highest outbox id at or below which no row can still
 * appear. Claiming only below it keeps each key's rows in id order even when writers'
 * transactions commit out of id order.
 *
 * Why it holds. Every insert takes its transaction id before its outbox id (the CASE in
 * the id default, sql/001_outbox.sql). A probe reads the sequence's last value L and then
 * the next transaction id to be handed out, X; every transaction holding an outbox id
 * <= L took its transaction id before that, so below X. Once a later snapshot's xmin
 * reaches X, all of them have committed or rolled back: rows with id <= L are final.
 * (xmin counts only transactions below the snapshot's xmax; one at or above it is above
 * xmin too, so xmin >= X still means none below X runs.)
 *
 * The probe reads; it takes no transaction id and writes no WAL.
 *
 * A long transaction anywhere in the database holds xmin back and so the horizon. A pair
 * older than `maxWaitMs` is released anyway (counted in `forcedAdvances`): order may
 * then break for a row whose transaction is still open, and only for such a row.
 *
 * Crashes. nextval WAL-logs the sequence 32 values ahead, and a rollback flushes
 * nothing; after a crash, recovery restores the sequence from the last record that
 * reached disk, possibly below ids already seen, and hands those ids out again. So a
 * pair also carries the WAL insert position read after L, and is released only once the
 * WAL is flushed past it: then no crash can bring ids <= L back. Committing writers flush
 * the WAL all the time; in a quiet database the WAL writer does within wal_writer_delay.
 * Two further guards: when the server's start time changes, or the sequence is found
 * below what was paired (setval), the horizon starts over from zero (counted in
 * `resets`); and claims carry the incarnation, so a claim racing a restart finds nothing.
 */
export class Horizon {
  /** Highest id known to be final; claims use `id <= watermark`. */
  watermark = 0;
  /** Times a pair was released before its transactions had all finished. */
  forcedAdvances = 0;
  /** Times the horizon started over (server restart, sequence rewound). */
  resets = 0;
  /** Start time of the server the watermark holds for (pg_postmaster_start_time, as text). */
  incarnation: string | undefined;
  /** Highest outbox id already paired (or released). */
  private pairedUpTo = 0;
  private pending: Array<{ lastId: number; xid: bigint; lsn: bigint; atMs: number }> = [];
  private readonly sql: string;

  constructor(
    quotedSchema: string,
    private readonly maxWaitMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.sql = horizonProbeSql(quotedSchema);
  }

  /**
   * Run one probe on `client` in a transaction of its own and advance the watermark
   * (on a connection from {@link openProbeConnection}).
   *
   * @returns true when the watermark moved
   */
  async probe(client: pg.ClientBase): Promise<boolean> {
    const { rows } = await client.query<HorizonProbeRow>(this.sql, [this.pairedUpTo]);
    const row = rows[0];
    if (!row) return false;
    if (this.incarnation !== undefined && row.started !== this.incarnation) this.reset();
    this.incarnation = row.started;
    return this.advance(
      BigInt(row.xmin),
      Number(row.last_id),
      row.xid === null ? null : BigInt(row.xid),
      row.lsn === null ? 0n : lsnToBigInt(row.lsn),
      lsnToBigInt(row.flushed),
    );
  }

  /** Forget everything released or paired: after a restart none of it is known to hold. */
  reset(): void {
    this.watermark = 0;
    this.pairedUpTo = 0;
    this.pending = [];
    this.resets++;
  }

  /**
   * The pure part of probe(), separate so it can be tested without a database.
   * `xmin` is from a snapshot taken before `lastId` was read and `xid` and `lsn` were
   * taken; `flushed` is how far the WAL is on disk.
   */
  advance(xmin: bigint, lastId: number, xid: bigint | null, lsn = 0n, flushed = 0n): boolean {
    // The sequence went backwards (setval, or a recovery we did not see as a restart): ids
    // above it may come again. This probe took no xid (last_id was not new), so the next
    // probe pairs afresh.
    if (lastId < this.pairedUpTo) this.reset();
    const before = this.watermark;
    const now = this.now();
    while (this.pending.length > 0) {
      const head = this.pending[0]!;
      if (head.xid <= xmin && head.lsn <= flushed) {
        this.watermark = Math.max(this.watermark, head.lastId);
      } else if (now - head.atMs >= this.maxWaitMs) {
        this.watermark = Math.max(this.watermark, head.lastId);
        this.forcedAdvances++;
      } else {
        break;
      }
      this.pending.shift();
    }
    if (xid !== null && lastId > this.pairedUpTo) {
      this.pending.push({ lastId, xid, lsn, atMs: now });
      this.pairedUpTo = lastId;
    }
    return this.watermark > before;
  }

  /** Whether ids above the watermark wait for a later probe to release them. */
  get hasPending(): boolean {
    return this.pending.length > 0;
  }

  /** Age of the oldest pair still waiting for its transactions, in ms (0 when none). */
  oldestWaitMs(): number {
    const head = this.pending[0];
    return head ? this.now() - head.atMs : 0;
  }
}
