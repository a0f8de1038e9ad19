// The outbox sequence's last value, as SQL: the visibility horizon, the ingress metric,
// partition headroom and the id audit read it.

/**
 * The last id the outbox sequence handed out, 0 before its first: an SQL scalar subquery.
 *
 * A subquery, not the bare call: pg_sequence_last_value is volatile, so in a WHERE clause
 * the bare call is a filter run for every row scanned, where the uncorrelated subquery is
 * read once and bounds the index scan (`id > $0`; the id audit's count of rows above the
 * sequence, test/planShapes.integration.test.ts).
 *
 * Read through pg_sequence_last_value, which takes the sequence's buffer lock. A plain
 * `SELECT last_value FROM outbox_id_seq` reads the tuple without it, and can catch nextval
 * inside its update, while the buffer holds the value it writes to the WAL: up to 32
 * ahead of the last id handed out (Postgres logs that many values at once). The next read
 * is then lower, and the relay's horizon, which had paired the higher value with a
 * transaction id, logged "horizon starts over: the outbox sequence went backwards" with no
 * setval and no recovery (issue 36; test/horizon.integration.test.ts shows both reads).
 */
export function outboxLastIdSql(quotedSchema: string): string {
  return `(SELECT coalesce(pg_catalog.pg_sequence_last_value('${quotedSchema}.outbox_id_seq'::regclass), 0))`;
}
