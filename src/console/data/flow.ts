import type pg from 'pg';
import type { MinuteFlow } from '../model.js';
import { flowSql } from '../sql/flow.js';

/**
 * The last 60 whole minutes of one outbox, oldest first: rows published and dead-lettered
 * (what the relays counted), and ingress, the ids the outbox sequence handed out (rows
 * whose transaction rolled back took one too; replayed rows, which keep their id, took
 * none). From outbox_relay_minutes, which the relays write about once a minute: no relay
 * process needs to be reachable, and a minute no relay recorded says so (`recorded`).
 */
export async function readFlow(pool: pg.Pool, quotedSchema: string): Promise<MinuteFlow[]> {
  const { rows } = await pool.query<{ minute: Date; recorded: boolean; sent: number; dead_lettered: number; ingress: number | null }>(flowSql(quotedSchema));
  return rows.map((r) => ({
    minute: r.minute,
    // No mark the minute before (a relay's first minute): unknown, not zero.
    ingress: r.ingress === null ? null : Number(r.ingress),
    egress: Number(r.sent),
    deadLettered: Number(r.dead_lettered),
    recorded: r.recorded,
  }));
}
