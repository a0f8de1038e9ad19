import type pg from 'pg';
import { connect } from './database.js';
import { quoteIdentifier } from './identifiers.js';
import { assertMigrated } from './migrate.js';
import { backlogSql, leasesSql, relaysSql } from './sql/status.js';

export interface StatusOptions {
  databaseUrl?: string;
  /** An open connection to use instead of databaseUrl; left open. */
  client?: pg.ClientBase;
  schema?: string;
}

/** A snapshot of the outbox and the relays working on it. */
export interface OutboxStatus {
  schema: string;
  pending: number;
  /** Age of the oldest unsent row in seconds; null when nothing is pending. */
  oldestPendingSeconds: number | null;
  relays: Array<{
    relayId: string;
    live: boolean;
    heartbeatAgeSeconds: number;
    startedAt: string;
    /** Shards with a valid lease, as compact ranges (`0-63,128`). */
    shards: string;
    shardCount: number;
  }>;
  /** Shards nobody holds a valid lease on (between owners, or no relay running). */
  unownedShards: string;
}

/** `outbox-relay status`: backlog, oldest pending age and which relay owns which shards. */
export async function getStatus(options: StatusOptions): Promise<OutboxStatus> {
  const schema = options.schema ?? 'public';
  const s = quoteIdentifier(schema, 'schema');
  const client = options.client ?? (await connect(options.databaseUrl as string, 'outbox-relay:status'));
  try {
    await assertMigrated(client, schema);
    const backlog = (await client.query<{ pending: number; oldest_pending_seconds: number | null }>(backlogSql(s))).rows[0]!;
    const relays = (await client.query<{ relay_id: string; started_at: Date; heartbeat_age_seconds: number; live: boolean }>(relaysSql(s))).rows;
    const leases = (await client.query<{ shard: number; owner: string | null; valid: boolean | null }>(leasesSql(s))).rows;
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
    return {
      schema,
      pending: Number(backlog.pending),
      oldestPendingSeconds: backlog.oldest_pending_seconds === null ? null : Number(backlog.oldest_pending_seconds),
      relays: relays.map((r) => ({
        relayId: r.relay_id,
        live: r.live,
        heartbeatAgeSeconds: Number(r.heartbeat_age_seconds),
        startedAt: r.started_at.toISOString(),
        shards: ranges(byOwner.get(r.relay_id) ?? []),
        shardCount: byOwner.get(r.relay_id)?.length ?? 0,
      })),
      unownedShards: ranges(unowned),
    };
  } finally {
    if (!options.client) await (client as pg.Client).end().catch(() => undefined);
  }
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
      (status.oldestPendingSeconds === null ? '' : `, oldest ${status.oldestPendingSeconds.toFixed(1)} s`),
    '',
  ];
  const rows = [['relay', 'state', 'heartbeat', 'shards', 'owned'], ...status.relays.map((r) => [r.relayId, r.live ? 'live' : 'dead', `${r.heartbeatAgeSeconds.toFixed(1)} s ago`, String(r.shardCount), r.shards || '-'])];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  for (const r of rows) lines.push(r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ').trimEnd());
  if (status.relays.length === 0) lines.push('(no relay has run against this schema)');
  if (status.unownedShards) lines.push('', `unowned shards: ${status.unownedShards}`);
  return lines.join('\n') + '\n';
}
