import type pg from 'pg';
import { statementName } from './horizon.js';
import { outboxLastIdSql } from '../shared/outboxSequence.js';

/**
 * Rows whose id is above the outbox sequence's last value: someone set `id` by hand
 * instead of taking it from the sequence. The visibility horizon (./horizon.ts) releases
 * ids only up to the sequence's last value, so such rows are not claimed until the
 * sequence passes them, and when it does they go out after rows enqueued later. The
 * relay cannot tell where they belong in their key's order; it says so instead of leaving
 * them unnoticed. Read-only, on the horizon probe's connection: the largest unsent id
 * above the sequence (none: nothing to report), and the sequence. Both scans of the
 * unsent index start at the sequence's last value: unbounded, `max(id)` walked down
 * through every entry of a row published since the oldest open snapshot when nothing
 * was pending (under a held horizon, millions every interval).
 */
export function idsAboveSequenceSql(quotedSchema: string): string {
  return `
SELECT (SELECT max(id) FROM ${quotedSchema}.outbox
          WHERE sent_at IS NULL
            AND id > ${outboxLastIdSql(quotedSchema)}) AS max_unsent_id,
       ${outboxLastIdSql(quotedSchema)} AS last_id,
       (SELECT count(*) FROM (SELECT 1 FROM ${quotedSchema}.outbox
                               WHERE sent_at IS NULL
                                 AND id > ${outboxLastIdSql(quotedSchema)}
                               LIMIT 1000) AS above) AS rows_above`;
}

/** What {@link IdAudit.check} found: unsent rows above the sequence. */
export interface IdsAboveSequence {
  /** Largest unsent id. */
  maxUnsentId: number;
  /** The sequence's last value. */
  sequenceLastValue: number;
  /** How many unsent rows are above it (counted up to 1000). */
  rows: number;
}

/** Looks for rows above the sequence at most every `intervalMs`; reports each new finding once. */
export class IdAudit {
  private lastCheckMs = Number.NEGATIVE_INFINITY;
  private reported: number | undefined;
  private readonly sql: string;
  private readonly name: string;

  constructor(
    quotedSchema: string,
    private readonly intervalMs = 10_000,
    private readonly now: () => number = Date.now,
  ) {
    this.sql = idsAboveSequenceSql(quotedSchema);
    this.name = statementName('outbox_relay_id_audit', this.sql);
  }

  /** @returns a finding when unsent rows above the sequence appeared (or their largest id changed) since the last report */
  async check(client: pg.ClientBase, prepared = true): Promise<IdsAboveSequence | undefined> {
    const now = this.now();
    if (now - this.lastCheckMs < this.intervalMs) return undefined;
    this.lastCheckMs = now;
    const { rows } = await client.query<{ max_unsent_id: string | null; last_id: string; rows_above: string }>({ ...(prepared ? { name: this.name } : {}), text: this.sql });
    const row = rows[0];
    const maxUnsentId = row?.max_unsent_id === null || row === undefined ? 0 : Number(row.max_unsent_id);
    const sequenceLastValue = Number(row?.last_id ?? 0);
    if (maxUnsentId <= sequenceLastValue) {
      this.reported = undefined;
      return undefined;
    }
    if (this.reported === maxUnsentId) return undefined;
    this.reported = maxUnsentId;
    return { maxUnsentId, sequenceLastValue, rows: Number(row?.rows_above ?? 0) };
  }
}
