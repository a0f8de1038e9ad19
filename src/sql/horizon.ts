/**
 * Probe for the visibility horizon (see src/horizon.ts for how the answers are used).
 *
 * Returns the statement snapshot's xmin and xmax and the outbox sequence's last value.
 * The snapshot is taken when the statement starts; last_value is read during it, and
 * sequences are not subject to MVCC, so last_id is at least as new as the snapshot.
 * xid8 values go out as text: they can exceed 2^53.
 */
export function horizonProbeSql(quotedSchema: string): string {
  return `
SELECT pg_snapshot_xmin(s)::text AS xmin,
       pg_snapshot_xmax(s)::text AS xmax,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
          FROM ${quotedSchema}.outbox_id_seq) AS last_id
  FROM pg_current_snapshot() AS s`;
}

export interface HorizonProbeRow {
  xmin: string;
  xmax: string;
  last_id: number;
}
