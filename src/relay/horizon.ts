import type pg from 'pg';
import { connect } from '../shared/database.js';
import { guardClientCalls } from '../shared/guardedPool.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import { horizonProbeSql, lsnToBigInt, type HorizonProbeRow } from './sql/horizon.js';

/**
 * A name for a statement node-pg prepares once per connection and then only executes
 * (Bind/Execute, no Parse): the horizon probe runs up to 200 times a second, and parsing
 * and planning it each time was 85 % of its Postgres time (0.31 ms planning against 0.05 ms
 * executing, pg_stat_statements at 1,000 rows/s). The text's hash is in the name: node-pg
 * refuses one name for two texts on a connection (two schemas probed on one connection).
 */
export function statementName(prefix: string, text: string): string {
  let h = 5381;
  for (let i = 0; i < text.length; i++) h = ((h * 33) ^ text.charCodeAt(i)) >>> 0;
  return `${prefix}_${h.toString(36)}`;
}

/**
 * A connection for {@link Horizon.probe}: read-only, outside any transaction. Its prepared
 * statements take their generic plan: left to choose, Postgres kept planning the probe
 * for its values at every call (a custom plan costs it nothing more to run: the probe's
 * plan does not depend on them).
 */
export async function openProbeConnection(databaseUrl: string, applicationName: string, prepared = true): Promise<pg.Client> {
  const client = guardClientCalls(await guardLibraryCall('pg', 'client.connect', () => connect(databaseUrl, applicationName)));
  // A session setting would stay on whatever server connection a transaction pooler
  // handed out; without prepared statements there is no generic plan to choose anyway.
  if (!prepared) return client;
  try {
    await client.query('SET plan_cache_mode = force_generic_plan');
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
  return client;
}

/** Why the horizon started over, with the values the probe compared. */
export interface HorizonReset {
  reason: string;
  startedBefore?: string;
  startedNow?: string;
  sequenceNow?: number;
  pairedUpTo?: number;
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
 * The relay's own batches do not count. A batch (claim FOR UPDATE, mark, delete,
 * dead-letter move) takes a transaction id, and with the rule above each held the horizon
 * back for everyone by a batch's duration (p99 commit-to-ack 29.5 ms at 1,000 rows/s).
 * None of them ever inserts an outbox row: a relay has no INSERT on the outbox
 * (sql/roles.sql) and its code has no such statement, so none holds an outbox id. The
 * probe therefore computes a second bound, others_xmin: the lowest id in its snapshot's
 * running list that no relay batch runs, or the snapshot's xmax when there is none. Every
 * transaction below others_xmin that is not a relay batch has finished (below xmax and not
 * running means finished). A running xid is ignored only when pg_stat_activity shows it as
 * the backend_xid of a backend whose statement starts with the batch marker of a relay
 * registered in outbox_relays (the comment `outbox-relay batch <relay id>`, sql/claim.ts
 * batchMarker: every statement of a batch starts with it, and a backend inside a
 * transaction shows a statement of that transaction): xids are unique, so that transaction
 * is that relay's batch. Not by application_name: behind a transaction pooler a server
 * connection keeps the name of whichever client set one last (PgBouncer 1.18 leaves it for
 * the next client that sets none), so an application's insert could run under a relay's
 * name, and ignoring it released its rows before they committed
 * (test/pgbouncer.relay.integration.test.ts, writers without an application_name). Of the
 * transactions that write the outbox (below), what is not ignored: the relay's attempt
 * counts (a few ms each), the dead-letter replay (it does insert outbox rows, under their
 * old ids), cleanup's deletes, the applications' writers; a backend whose statement the
 * probe's role may not see (pg_stat_activity shows NULL) counts as running, which only
 * waits longer.
 *
 * Nor do transactions that never wrote the outbox. Inserting a row takes a RowExclusiveLock
 * on the outbox (or the partition written) when the INSERT (or COPY, or a trigger's
 * statement) is analysed, before its id default runs; the lock is held until the
 * transaction ends. So a transaction holding an outbox id <= L held that lock when the
 * probe read L, and still holds it when the probe reads pg_locks after L, unless it has
 * finished. others_xmin therefore counts only running xids whose transaction (found by
 * the ExclusiveLock every transaction holds on its own xid, joined on the virtual
 * transaction, which also covers a prepared transaction) holds a write lock on the outbox
 * or one of its partitions. A transaction that took an xid elsewhere (an UPDATE of another
 * table, a report, a migration) and never inserted an outbox row delays nothing; once it
 * inserts one, it holds the lock and counts. pg_locks is readable by every role.
 *
 * A long transaction that did write the outbox holds the horizon back. A pair older than
 * `maxWaitMs` is released anyway (counted in `forcedAdvances`): order may then break for a
 * row whose transaction is still open, and only for such a row.
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
 *
 * `settled` is the highest id at or below which every row is final (committed or rolled
 * back): the watermark, except after a forced release, when it stays at the last pair
 * released properly until the transactions the forced pair waited for are gone. Claim
 * floors (floor.ts) never rise above it: a row that commits late below a forced
 * watermark must still be found.
 */
export class Horizon {
  /** Highest id known to be final; claims use `id <= watermark`. */
  watermark = 0;
  /** Highest id at or below which every row is committed or rolled back (<= watermark; see above). */
  settled = 0;
  /** Times a pair was released before its transactions had all finished. */
  forcedAdvances = 0;
  /** Times the horizon started over (server restart, sequence rewound). */
  resets = 0;
  /** What the probe saw the last time the horizon started over. */
  lastReset: HorizonReset | undefined;
  /** Start time of the server the watermark holds for (pg_postmaster_start_time, as text). */
  incarnation: string | undefined;
  /** The same start time in seconds since the epoch, as text: what probes compare (the text form follows the session's TimeZone). */
  private startedEpoch: string | undefined;
  /** Highest outbox id already paired (or released). */
  pairedUpTo = 0;
  /**
   * Times a probe saw the claim floors' generation move: rows came back below the
   * watermark (a replay, a key unparked), which only a claim scanning from its floor's
   * start finds. Workers compare it with what they saw last, to claim at once rather than
   * at their next idle recheck (up to 5 s later).
   */
  rowsReturned = 0;
  private floorGeneration: string | null | undefined;
  private pending: Array<{ lastId: number; xid: bigint; lsn: bigint; atMs: number }> = [];
  /** Pairs released by force whose transactions may still run (oldest first). */
  private forced: Array<{ lastId: number; xid: bigint; lsn: bigint }> = [];
  private readonly sql: string;
  /** The probe's prepared-statement name on its connection (see {@link statementName}). */
  private readonly name: string;

  constructor(
    quotedSchema: string,
    private readonly maxWaitMs: number,
    private readonly now: () => number = Date.now,
  ) {
    this.sql = horizonProbeSql(quotedSchema);
    this.name = statementName('outbox_relay_horizon', this.sql);
  }

  /**
   * Run one probe on `client` in a transaction of its own and advance the watermark
   * (on a connection from {@link openProbeConnection}). `prepared` false: as an unnamed
   * statement, for a connection through a transaction-pooling proxy (poolerProbe.ts).
   *
   * @returns true when the watermark moved
   */
  async probe(client: pg.ClientBase, prepared = true): Promise<boolean> {
    const waitingFor = this.pending.at(-1)?.xid ?? this.forced.at(-1)?.xid;
    const { rows } = await client.query<HorizonProbeRow>({
      ...(prepared ? { name: this.name } : {}),
      text: this.sql,
      values: [this.pairedUpTo, waitingFor === undefined ? null : waitingFor.toString()],
    });
    const row = rows[0];
    if (!row) return false;
    if (this.startedEpoch !== undefined && row.started_epoch !== this.startedEpoch) {
      this.reset({ reason: 'the server start time changed (Postgres restarted)', startedBefore: this.incarnation, startedNow: row.started });
    }
    this.incarnation = row.started;
    this.startedEpoch = row.started_epoch;
    if (this.floorGeneration !== undefined && row.floor_generation !== this.floorGeneration) this.rowsReturned++;
    this.floorGeneration = row.floor_generation;
    return this.advance(
      BigInt(row.others_xmin ?? row.xmin),
      Number(row.last_id),
      row.xid === null ? null : BigInt(row.xid),
      row.lsn === null ? 0n : lsnToBigInt(row.lsn),
      lsnToBigInt(row.flushed),
    );
  }

  /**
   * Forget everything released or paired: after a restart none of it is known to hold.
   * `seen` says what the probe saw, for the log line ({@link lastReset}).
   */
  reset(seen: HorizonReset = { reason: 'asked to start over' }): void {
    this.lastReset = seen;
    this.watermark = 0;
    this.settled = 0;
    this.pairedUpTo = 0;
    this.pending = [];
    this.forced = [];
    this.resets++;
  }

  /**
   * The pure part of probe(), separate so it can be tested without a database.
   * `xmin` is from a snapshot taken before `lastId` was read and `xid` and `lsn` were
   * taken (every transaction below it that is not a relay's has finished); `flushed` is
   * how far the WAL is on disk.
   */
  advance(xmin: bigint, lastId: number, xid: bigint | null, lsn = 0n, flushed = 0n): boolean {
    // The sequence went backwards (setval, or a recovery we did not see as a restart): ids
    // above it may come again. This probe took no xid (last_id was not new), so the next
    // probe pairs afresh.
    if (lastId < this.pairedUpTo) this.reset({ reason: 'the outbox sequence went backwards (setval, or a recovery)', sequenceNow: lastId, pairedUpTo: this.pairedUpTo });
    const before = this.watermark;
    const now = this.now();
    while (this.forced.length > 0 && this.forced[0]!.xid <= xmin && this.forced[0]!.lsn <= flushed) {
      this.settled = Math.max(this.settled, this.forced.shift()!.lastId);
    }
    while (this.pending.length > 0) {
      const head = this.pending[0]!;
      if (head.xid <= xmin && head.lsn <= flushed) {
        this.watermark = Math.max(this.watermark, head.lastId);
        // Every pair released by force is older (smaller xid, earlier lsn): settled too.
        this.settled = this.watermark;
        this.forced = [];
      } else if (now - head.atMs >= this.maxWaitMs) {
        this.watermark = Math.max(this.watermark, head.lastId);
        this.forced.push({ lastId: head.lastId, xid: head.xid, lsn: head.lsn });
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
