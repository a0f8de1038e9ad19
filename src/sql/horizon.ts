/**
 * Probe for the visibility horizon (src/horizon.ts explains how the answers are used).
 *
 * $1 bigint  the highest outbox id already paired with a transaction id
 *
 * Returns, in this order of events:
 *   xmin     the statement snapshot's xmin: every transaction id below it has finished
 *            (taken when the statement starts);
 *   last_id  the outbox sequence's last value, read after that (sequences are not
 *            subject to MVCC, so this is the live value);
 *   xid      only when last_id is new: a transaction id taken for this statement after
 *            last_id was read (the CASE orders the two). It is larger than the id of any
 *            transaction that took an outbox id <= last_id;
 *   started  when the server started: a watermark belongs to one server incarnation, since
 *            crash recovery can rewind the sequence below ids already released (nextval
 *            WAL-logs 32 values ahead, and an unflushed record is lost).
 *
 * Not pg_snapshot_xmax: it is latestCompletedXid + 1, and transactions that got their
 * id after the last commit are running yet at or above it, so it is no upper bound.
 * xid8 values go out as text: they can exceed 2^53.
 */
export function horizonProbeSql(quotedSchema: string): string {
  return `
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin,
       seq.last_id,
       CASE WHEN seq.last_id > $1 THEN pg_current_xact_id()::text END AS xid,
       pg_postmaster_start_time()::text AS started
  FROM (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS last_id
          FROM ${quotedSchema}.outbox_id_seq) AS seq`;
}

export interface HorizonProbeRow {
  xmin: string;
  last_id: number;
  xid: string | null;
  started: string;
}
