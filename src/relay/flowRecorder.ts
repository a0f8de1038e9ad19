import type pg from 'pg';
import { recordMinutesSql } from './sql/flow.js';

const MINUTE_MS = 60_000;
/** Minutes kept in memory while writes fail (the console shows the last hour). */
const KEPT_MINUTES = 120;

interface Counts {
  sent: number;
  deadLettered: number;
}

/**
 * What the relay did per minute, for the console's flow chart (outbox_relay_minutes,
 * sql/010_console.sql): rows published and rows dead-lettered, added up in memory as
 * batches commit (nothing on the batch's path touches the database for it), written
 * about once a minute by the lease loop and once more on a soft stop.
 *
 * Each write also stamps the minute just ended with the outbox sequence's value, so the
 * console can tell ingress (ids handed out) from egress with no relay process reachable.
 * A minute is written even when nothing was published in it: a relay whose breaker is
 * open still records what came in.
 */
export class FlowRecorder {
  private readonly minutes = new Map<number, Counts>();
  /** The minute (start, ms) written last; a write is due once the clock is past the minute after it. */
  private writtenUpTo: number;

  constructor(
    private readonly quotedSchema: string,
    private readonly relayId: string,
    private readonly now: () => number = Date.now,
  ) {
    this.writtenUpTo = minuteOf(this.now()) - MINUTE_MS;
  }

  /** Rows published (a committed batch). */
  sent(count: number): void {
    this.at(this.now()).sent += count;
  }

  /** Rows moved to the dead letters (committed). */
  deadLettered(count: number): void {
    this.at(this.now()).deadLettered += count;
  }

  /** A minute has ended since the last write. */
  get due(): boolean {
    return minuteOf(this.now()) - MINUTE_MS > this.writtenUpTo;
  }

  /**
   * Write the minutes that have ended (with `final`, the current one too, as far as it
   * went); what was written leaves memory. A failed write keeps the counts for the next.
   */
  async write(db: pg.ClientBase | pg.Pool, final = false): Promise<void> {
    const current = minuteOf(this.now());
    const upTo = final ? current : current - MINUTE_MS;
    // The minute just ended gets a row even when nothing happened in it: its sequence mark.
    this.at(upTo);
    const rows = [...this.minutes].filter(([m]) => m <= upTo).sort(([a], [b]) => a - b);
    await db.query(recordMinutesSql(this.quotedSchema), [
      rows.map(([m]) => new Date(m)),
      this.relayId,
      rows.map(([, c]) => c.sent),
      rows.map(([, c]) => c.deadLettered),
    ]);
    for (const [m] of rows) this.minutes.delete(m);
    this.writtenUpTo = Math.max(this.writtenUpTo, upTo);
  }

  private at(nowMs: number): Counts {
    const minute = minuteOf(nowMs);
    let counts = this.minutes.get(minute);
    if (!counts) {
      this.minutes.set(minute, (counts = { sent: 0, deadLettered: 0 }));
      if (this.minutes.size > KEPT_MINUTES) this.minutes.delete(Math.min(...this.minutes.keys()));
    }
    return counts;
  }
}

function minuteOf(ms: number): number {
  return Math.floor(ms / MINUTE_MS) * MINUTE_MS;
}
