import type { DatabaseOptions } from '../shared/database.js';
import { DEFAULT_SCHEMA, quoteSchema } from '../shared/identifiers.js';
import { openDatabase } from './openDatabase.js';
import { idsAboveSequenceSql } from '../relay/idAudit.js';
import { oldestLockHolder, type OutboxLockHolder } from '../relay/lockHolder.js';
import { backlogSql, deadLettersByReasonSql, deadLetterTotalsSql, inFlightSql, leasesSql, parkedKeysOutOfStepSql, parkedKeysSql, relaysSql } from './sql/status.js';

/** Where to read the status from: a client, a pool or a URL, and the schema. */
export type StatusOptions = DatabaseOptions;

/** A snapshot of the outbox and the relays working on it. */
export interface OutboxStatus {
  schema: string;
  pending: number;
  /** Age of the oldest unsent row in seconds; null when nothing is pending. */
  oldestPendingSeconds: number | null;
  /** Pending rows of parked keys: they wait, in order, until the key's dead letter is replayed or discarded. */
  pendingBehindParkedKeys: number;
  /**
   * Batches being published right now: relay transactions holding claimed rows (each at
   * most the relay's batch size). Batches, not rows: counting locked rows would mean a scan
   * of the backlog. Counts only sessions the status user may see (same role, or
   * pg_read_all_stats).
   */
  inFlightBatches: number;
  /**
   * Unsent rows inserted with an explicit id above the outbox sequence (counted up to
   * 1000): never claimed until the sequence passes them, and the sequence will hand out
   * their ids again. null when there are none.
   */
  idsAboveSequence: { rows: number; maxUnsentId: number; sequenceLastValue: number } | null;
  /**
   * The oldest open transaction that wrote the outbox (holds a write lock on it), other than
   * a relay's batch: rows with higher ids wait for it (the visibility horizon), up to the
   * relay's horizon-max-wait-ms. null when none is open. No query text.
   */
  oldestOutboxWriter: OutboxLockHolder | null;
  deadLetters: {
    total: number;
    /** Seconds since the newest dead letter; null when there are none. */
    newestSeconds: number | null;
    /** By (error name, reason), most frequent first; at most 20 groups. */
    byReason: Array<{ errorName: string; reason: string; count: number; parked: number; firstAt: string; lastAt: string }>;
  };
  parkedKeys: {
    total: number;
    /** The keys parked longest (at most 10), with the rows waiting behind each. */
    oldest: Array<{ topic: string; key: string; deadLetterId: number; parkedAt: string; parkedSeconds: number; waiting: number }>;
    /**
     * Parks out of step with the dead letters (a key is parked exactly while it has dead
     * letters with policy park; migration 012 keeps it so, and only writing the tables by
     * hand breaks it): parked keys whose dead letter is gone or is not a park dead letter
     * of the key, and park dead letters whose key is not parked. Both 0 normally.
     */
    outOfStep: { parksWithoutDeadLetter: number; deadLettersWithoutPark: number };
  };
  relays: Array<{
    relayId: string;
    live: boolean;
    heartbeatAgeSeconds: number;
    startedAt: string;
    /** Shards with a valid lease, as compact ranges (`0-63,128`). */
    shards: string;
    shardCount: number;
    /** This relay's batches in flight (see inFlightBatches). */
    inFlightBatches: number;
  }>;
  /** Shards nobody holds a valid lease on (between owners, or no relay running). */
  unownedShards: string;
}

const REASON_GROUPS = 20;
const PARKED_SHOWN = 10;

/**
 * `outbox-relay status`: backlog, oldest pending age, batches in flight, dead letters by
 * reason, parked keys, and which relay owns which shards. Read-only; a handful of queries,
 * the heaviest a pass over the unsent rows (the backlog).
 */
export async function getStatus(options: StatusOptions): Promise<OutboxStatus> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const s = quoteSchema(schema);
  const { db: client, close } = await openDatabase(options, 'outbox-relay:status');
  try {
    const backlog = (await client.query<{ pending: number; oldest_pending_seconds: number | null; pending_behind_parked: number }>(backlogSql(s))).rows[0]!;
    const inFlight = new Map(
      (await client.query<{ relay_id: string; batches: number }>(inFlightSql(s))).rows.map((r) => [r.relay_id, Number(r.batches)]),
    );
    const above = (await client.query<{ max_unsent_id: number | null; last_id: number; rows_above: number }>(idsAboveSequenceSql(s))).rows[0];
    const writer = await oldestLockHolder(client, s, true);
    const dlTotals = (await client.query<{ total: number; newest_seconds: number | null }>(deadLetterTotalsSql(s))).rows[0]!;
    const byReason = (
      await client.query<{ error_name: string; reason: string; count: number; parked: number; first_at: Date; last_at: Date }>(deadLettersByReasonSql(s), [REASON_GROUPS])
    ).rows;
    const parked = (
      await client.query<{ topic: string; key: string; dead_letter_id: number; parked_at: Date; parked_seconds: number; waiting: number; total: number }>(parkedKeysSql(s), [PARKED_SHOWN])
    ).rows;
    const outOfStep = (await client.query<{ parks_without_dead_letter: number; dead_letters_without_park: number }>(parkedKeysOutOfStepSql(s))).rows[0]!;
    const relays = (await client.query<{ relay_id: string; started_at: Date; heartbeat_age_seconds: number; live: boolean }>(relaysSql(s))).rows;
    const leases = (await client.query<{ shard: number; owner: string | null; valid: boolean | null }>(leasesSql(s))).rows;
    const { byOwner, unowned } = shardsByOwner(leases);
    return {
      schema,
      pending: Number(backlog.pending),
      oldestPendingSeconds: backlog.oldest_pending_seconds === null ? null : Number(backlog.oldest_pending_seconds),
      pendingBehindParkedKeys: Number(backlog.pending_behind_parked),
      inFlightBatches: [...inFlight.values()].reduce((a, b) => a + b, 0),
      idsAboveSequence:
        above && Number(above.rows_above) > 0
          ? { rows: Number(above.rows_above), maxUnsentId: Number(above.max_unsent_id), sequenceLastValue: Number(above.last_id) }
          : null,
      oldestOutboxWriter: writer,
      deadLetters: {
        total: Number(dlTotals.total),
        newestSeconds: dlTotals.newest_seconds === null ? null : Number(dlTotals.newest_seconds),
        byReason: byReason.map((r) => ({
          errorName: r.error_name,
          reason: r.reason,
          count: Number(r.count),
          parked: Number(r.parked),
          firstAt: r.first_at.toISOString(),
          lastAt: r.last_at.toISOString(),
        })),
      },
      parkedKeys: {
        total: parked.length ? Number(parked[0]!.total) : 0,
        oldest: parked.map((p) => ({
          topic: p.topic,
          key: p.key,
          deadLetterId: Number(p.dead_letter_id),
          parkedAt: p.parked_at.toISOString(),
          parkedSeconds: Number(p.parked_seconds),
          waiting: Number(p.waiting),
        })),
        outOfStep: {
          parksWithoutDeadLetter: Number(outOfStep.parks_without_dead_letter),
          deadLettersWithoutPark: Number(outOfStep.dead_letters_without_park),
        },
      },
      relays: relays.map((r) => ({
        relayId: r.relay_id,
        live: r.live,
        heartbeatAgeSeconds: Number(r.heartbeat_age_seconds),
        startedAt: r.started_at.toISOString(),
        shards: ranges(byOwner.get(r.relay_id) ?? []),
        shardCount: byOwner.get(r.relay_id)?.length ?? 0,
        inFlightBatches: inFlight.get(r.relay_id) ?? 0,
      })),
      unownedShards: ranges(unowned),
    };
  } finally {
    await close();
  }
}

/** The shards each relay holds a valid lease on, and those nobody does (rows of leasesSql, in shard order). */
export function shardsByOwner(leases: ReadonlyArray<{ shard: number; owner: string | null; valid: boolean | null }>): { byOwner: Map<string, number[]>; unowned: number[] } {
  const byOwner = new Map<string, number[]>();
  const unowned: number[] = [];
  for (const l of leases) {
    if (l.owner && l.valid) {
      let list = byOwner.get(l.owner);
      if (!list) byOwner.set(l.owner, (list = []));
      list.push(l.shard);
    } else {
      unowned.push(l.shard);
    }
  }
  return { byOwner, unowned };
}

/** `[0,1,2,5]` as `0-2,5`. */
export function ranges(sorted: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(',');
}

/** The status as a few lines for a terminal. */
export function formatStatus(status: OutboxStatus): string {
  const lines = [
    `schema ${status.schema}: ${status.pending} pending` +
      (status.oldestPendingSeconds === null ? '' : `, oldest ${status.oldestPendingSeconds.toFixed(1)} s`) +
      (status.pendingBehindParkedKeys ? ` (${status.pendingBehindParkedKeys} waiting behind parked keys)` : '') +
      `, ${status.inFlightBatches} ${status.inFlightBatches === 1 ? 'batch' : 'batches'} in flight`,
    '',
  ];
  table(lines, [['relay', 'state', 'heartbeat', 'shards', 'owned', 'in flight'], ...status.relays.map((r) => [r.relayId, r.live ? 'live' : 'dead', `${r.heartbeatAgeSeconds.toFixed(1)} s ago`, String(r.shardCount), r.shards || '-', String(r.inFlightBatches)])]);
  if (status.relays.length === 0) lines.push('(no relay has run against this schema)');
  if (status.unownedShards) lines.push('', `unowned shards: ${status.unownedShards}`);
  const writer = status.oldestOutboxWriter;
  if (writer && (writer.transactionAgeSeconds ?? 0) >= 1) {
    lines.push(
      '',
      `open outbox writer: pid ${writer.pid} (${writer.applicationName || 'no application name'}, ${writer.state ?? 'state hidden'}), transaction open ${age(writer.transactionAgeSeconds ?? 0)}: newer rows wait for it, up to the relay's --horizon-max-wait-ms (docs/runbook.md, "Horizon held")`,
    );
  }
  const above = status.idsAboveSequence;
  if (above) {
    lines.push(
      '',
      `rows above the sequence: ${above.rows}${above.rows >= 1000 ? '+' : ''} unsent (ids up to ${above.maxUnsentId}, outbox_id_seq at ${above.sequenceLastValue}): not published until the sequence passes them, and inserts will collide with them; fix: docs/runbook.md, "Rows above the sequence" (setval)`,
    );
  }

  const dl = status.deadLetters;
  lines.push('', `dead letters: ${dl.total}` + (dl.newestSeconds === null ? '' : `, newest ${age(dl.newestSeconds)} ago`));
  if (dl.byReason.length) {
    table(lines, [['count', 'parked', 'error', 'reason'], ...dl.byReason.map((g) => [String(g.count), String(g.parked), g.errorName, oneLine(g.reason, 100)])], '  ');
    const shown = dl.byReason.reduce((a, g) => a + g.count, 0);
    if (shown < dl.total) lines.push(`  (${dl.total - shown} more in smaller groups: outbox-relay dead-letters list)`);
  }
  const pk = status.parkedKeys;
  lines.push('', `parked keys: ${pk.total}`);
  if (pk.oldest.length) {
    table(lines, [['topic', 'key', 'dead letter', 'parked', 'waiting'], ...pk.oldest.map((p) => [p.topic, p.key, String(p.deadLetterId), `${age(p.parkedSeconds)} ago`, String(p.waiting)])], '  ');
    if (pk.total > pk.oldest.length) lines.push(`  (${pk.total - pk.oldest.length} more)`);
  }
  const odd = pk.outOfStep;
  if (odd.parksWithoutDeadLetter || odd.deadLettersWithoutPark) {
    lines.push(
      `parked keys out of step with their dead letters: ${odd.parksWithoutDeadLetter} parked behind a dead letter that is gone (or not a park dead letter of the key), ` +
        `${odd.deadLettersWithoutPark} park dead letters whose key is not parked; fix: docs/runbook.md, "Parked keys out of step"`,
    );
  }
  return lines.join('\n') + '\n';
}

function table(lines: string[], rows: string[][], indent = ''): void {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  for (const r of rows) lines.push(indent + r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ').trimEnd());
}

function age(seconds: number): string {
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7_200) return `${(seconds / 60).toFixed(0)} min`;
  if (seconds < 172_800) return `${(seconds / 3_600).toFixed(1)} h`;
  return `${(seconds / 86_400).toFixed(1)} d`;
}

function oneLine(text: string, max: number): string {
  const t = text.replace(/\s+/g, ' ').trim();
  return t.length > max ? `${t.slice(0, max - 1)}…` : t;
}
