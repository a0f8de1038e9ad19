/**
 * Probe for the visibility horizon (src/horizon.ts explains how the answers are used).
 *
 * $1 bigint  the highest outbox id already paired with a transaction id
 *
 * Returns, in this order of events:
 *   xmin     the statement snapshot's xmin: every transaction id below it has finished
 *            (taken when the statement starts);
 *   flushed  how far the WAL is on disk now;
 *   last_id  the outbox sequence's last value, read after the snapshot (sequences are
 *            not subject to MVCC, so this is the live value);
 *   xid, lsn only when last_id is new, and after it was read (a scan's row is read
 *            before the select list is computed): the next transaction id to be handed
 *            out, larger than that of any transaction that took an outbox id <= last_id;
 *            and the WAL insert position, at or past the sequence's WAL record covering
 *            last_id;
 *   started  when the server started.
 *
 * The next transaction id comes from age(): for a transaction without an id of its own it
 * is computed against the next id to be handed out (read once, at its first call), so
 * xmin + age(xmin) is that id, read without taking one: the probe writes nothing, not
 * even a commit record. Not pg_snapshot_xmax: it is latestCompletedXid + 1, and
 * transactions that got their id after the last commit run at or above it.
 * xid8 and LSN values go out as text: they can exceed 2^53.
 */
export function horizonProbeSql(quotedSchema: string): string {
  return `
SELECT snap.xmin::text AS xmin,
       pg_current_wal_flush_lsn()::text AS flushed,
       seq.last_id,
       CASE WHEN seq.last_id > $1
            THEN (snap.xmin::text::numeric + age((snap.xmin::text::numeric % 4294967296)::text::xid))::text
       END AS xid,
       CASE WHEN seq.last_id > $1 THEN pg_current_wal_insert_lsn()::text END AS lsn,
       pg_postmaster_start_time()::text AS started
  FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) AS snap,
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS last_id
          FROM ${quotedSchema}.outbox_id_seq) AS seq`;
}

export interface HorizonProbeRow {
  xmin: string;
  flushed: string;
  last_id: number;
  xid: string | null;
  lsn: string | null;
  started: string;
}

/** A pg_lsn's text form (`16/B374D848`) as a number that orders like the LSN. */
export function lsnToBigInt(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}
