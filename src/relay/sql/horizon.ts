import { OUTBOX_WRITE_LOCK_MODES, onOutboxSql } from './lockHolders.js';
import { outboxLastIdSql } from '../../shared/outboxSequence.js';

/**
 * Probe for the visibility horizon (src/horizon.ts explains how the answers are used).
 *
 * $1 bigint  the highest outbox id already paired with a transaction id
 * $2 text    (xid8) the newest transaction id a pair waits for, or NULL when none waits
 *
 * Returns, in this order of events:
 *   xmin     the statement snapshot's xmin: every transaction id below it has finished
 *            (taken when the statement starts);
 *   others_xmin  only when a pair waits ($2) and xmin is below it: the same bound, but
 *            counting only the transactions that may hold an outbox id, and of those not
 *            the batch transactions of this outbox's relays, which never insert outbox
 *            rows (src/relay/horizon.ts has the argument): the lowest xid in the
 *            snapshot's running list whose transaction holds a write lock on the outbox
 *            (or one of its partitions) in pg_locks, read after last_id, and that no relay
 *            batch runs, counting only xids below $2 (a pair waits for none above it); or
 *            the snapshot's xmax when there is none (a transaction at or above xmax is
 *            not in the list, and may be a writer);
 *   flushed  how far the WAL is on disk now;
 *   last_id  the outbox sequence's last value, read after the snapshot (sequences are
 *            not subject to MVCC, so this is the live value);
 *   xid, lsn only when last_id is new, and after it was read (a scan's row is read
 *            before the select list is computed): the next transaction id to be handed
 *            out, larger than that of any transaction that took an outbox id <= last_id;
 *            and the WAL insert position, at or past the sequence's WAL record covering
 *            last_id;
 *   started  when the server started, as text (claims pass it back as a timestamptz), and
 *            started_epoch, the same instant in seconds: the text follows the session's
 *            TimeZone and DateStyle (a pooled server connection may carry another
 *            client's), so only the epoch is compared;
 *   floor_generation  outbox_claim_floors.generation (sql/005_claim_floors.sql): it moves
 *            when rows may have come back below the horizon (a dead letter replayed, a
 *            parked key released), which moves neither the sequence nor the watermark.
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
       CASE WHEN $2::text IS NOT NULL AND snap.xmin < $2::text::xid8 THEN
         (WITH locks AS MATERIALIZED (
                 SELECT locktype, mode, granted, virtualtransaction, database, relation, transactionid FROM pg_locks),
               writers AS (
                 SELECT t.transactionid::text::numeric AS xid
                   FROM locks AS t
                   JOIN locks AS w ON w.virtualtransaction = t.virtualtransaction
                  WHERE t.locktype = 'transactionid' AND t.mode = 'ExclusiveLock' AND t.granted
                    AND w.mode IN ${OUTBOX_WRITE_LOCK_MODES}
                    AND ${onOutboxSql('w', quotedSchema)})
          -- Cheapest test first: running xids below the newest one a pair waits for, not a
          -- relay's batch (OFFSET 0 keeps this apart); pg_locks is read only when one is left.
          SELECT coalesce(min(c.x), pg_snapshot_xmax(snap.s))::text
            FROM (SELECT x
                    FROM pg_snapshot_xip(snap.s) AS x
                   WHERE x < $2::text::xid8
                     AND NOT EXISTS (
                           SELECT 1
                             FROM pg_stat_activity AS a
                             JOIN ${quotedSchema}.outbox_relays AS r
                               ON left(a.query, length('/* outbox-relay batch ' || r.relay_id || ' */')) = '/* outbox-relay batch ' || r.relay_id || ' */'
                            WHERE a.backend_xid IS NOT NULL
                              AND a.backend_xid::text::numeric = x::text::numeric % 4294967296)
                  OFFSET 0) AS c
           WHERE c.x::text::numeric % 4294967296 IN (SELECT xid FROM writers))
       END AS others_xmin,
       pg_current_wal_flush_lsn()::text AS flushed,
       seq.last_id,
       CASE WHEN seq.last_id > $1
            THEN (snap.xmin::text::numeric + age((snap.xmin::text::numeric % 4294967296)::text::xid))::text
       END AS xid,
       CASE WHEN seq.last_id > $1 THEN pg_current_wal_insert_lsn()::text END AS lsn,
       pg_postmaster_start_time()::text AS started,
       extract(epoch FROM pg_postmaster_start_time())::text AS started_epoch,
       (SELECT generation FROM ${quotedSchema}.outbox_claim_floors)::text AS floor_generation
  FROM (SELECT pg_snapshot_xmin(s) AS xmin, s FROM pg_current_snapshot() AS s) AS snap,
       (SELECT ${outboxLastIdSql(quotedSchema)} AS last_id) AS seq`;
}

export interface HorizonProbeRow {
  xmin: string;
  others_xmin: string | null;
  flushed: string;
  last_id: number;
  xid: string | null;
  lsn: string | null;
  started: string;
  started_epoch: string;
  floor_generation: string | null;
}

/** A pg_lsn's text form (`16/B374D848`) as a number that orders like the LSN. */
export function lsnToBigInt(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}
