// The SQL the tenant relay runs: finding tenants, noticing their activity, and the
// notify-on-insert trigger that lets it sleep while they are idle. Schema names are
// validated and quoted by the caller.

/**
 * Schemas of the current database whose name matches a POSIX regular expression ($1) and
 * that hold an `outbox` table with the relay's bookkeeping (migrated). Each schema's two
 * tables are looked up by name and schema in pg_class's index, one schema at a time (the
 * LIMITs keep the planner from joining otherwise): with catalog statistics that no
 * autovacuum refreshed, a plain join was planned as nested loops over every schema's
 * outbox, 1.8 s for 1,000 tenants against 20 ms this way.
 */
export const SCHEMAS_WITH_OUTBOX = `
SELECT n.nspname AS schema
  FROM pg_namespace n
  CROSS JOIN LATERAL (SELECT 1 FROM pg_class c WHERE c.relname = 'outbox' AND c.relnamespace = n.oid AND c.relkind IN ('r', 'p') LIMIT 1) AS outbox
  CROSS JOIN LATERAL (SELECT 1 FROM pg_class m WHERE m.relname = 'outbox_migrations' AND m.relnamespace = n.oid LIMIT 1) AS migrated
 WHERE n.nspname ~ $1
 ORDER BY n.nspname`;

/** Databases of the server whose name matches a POSIX regular expression ($1) and that take connections. */
export const DATABASES_MATCHING = `
SELECT datname AS database
  FROM pg_database
 WHERE datname ~ $1 AND datallowconn AND NOT datistemplate
 ORDER BY datname`;

/** Whether schema $1 of the current database holds a migrated outbox. */
export const HAS_OUTBOX = `
SELECT to_regclass(format('%I.outbox', $1::text)) IS NOT NULL
   AND to_regclass(format('%I.outbox_migrations', $1::text)) IS NOT NULL AS present`;

/** Rows waiting in one schema's outbox, not held by a parked key (what a relay would claim). */
export function unsentExists(quotedSchema: string): string {
  return `SELECT EXISTS (
  SELECT 1 FROM ${quotedSchema}.outbox o
   WHERE o.sent_at IS NULL
     AND NOT EXISTS (SELECT 1 FROM ${quotedSchema}.outbox_parked_keys p WHERE p.topic = o.topic AND p.key = o.key)
)`;
}

/** Unsent rows of one schema's outbox, counted up to $1 (the unsent index; a huge backlog is not counted to its end). */
export function backlogSql(quotedSchema: string): string {
  return `SELECT count(*)::int AS n FROM (SELECT 1 FROM ${quotedSchema}.outbox WHERE sent_at IS NULL LIMIT $1) AS waiting`;
}

/** Which of several schemas have rows waiting: one statement for many, each branch on the unsent index. */
export function schemasWithUnsent(quotedSchemas: readonly string[]): string {
  return quotedSchemas.map((q, i) => `SELECT ${i} AS i WHERE (${unsentExists(q)})`).join('\nUNION ALL\n');
}

/** Schemas of the current database whose outbox has the insert trigger ({@link insertNotifySql}), enabled. */
export const SCHEMAS_NOTIFYING = `
SELECT n.nspname AS schema
  FROM pg_trigger t
  JOIN pg_class c ON c.oid = t.tgrelid AND c.relname = 'outbox'
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE t.tgname = 'outbox_notify_insert' AND t.tgenabled <> 'D'`;

/** Rows inserted into the outbox of each of several schemas ($1) of the current database, as the statistics have it. */
export const INSERTS_PER_SCHEMA = `
SELECT schemaname AS schema, n_tup_ins::text AS inserted
  FROM pg_stat_user_tables
 WHERE relname = 'outbox' AND schemaname = ANY($1::text[])`;

/** Rows inserted per database since the server's statistics were reset (cluster-wide, from any database). */
export const INSERTS_PER_DATABASE = `
SELECT datname AS database, tup_inserted::text AS inserted
  FROM pg_stat_database
 WHERE datname = ANY($1::text[])`;

/** The channel the insert trigger notifies; the payload is the outbox's schema. */
export const INSERT_CHANNEL = 'outbox_relay_insert';

/**
 * The statement-level trigger that notifies {@link INSERT_CHANNEL} when rows enter the
 * outbox. Postgres sends the notification at commit, once per transaction and payload,
 * however many rows and statements the transaction inserted; a rolled-back transaction
 * sends nothing.
 */
export function insertNotifySql(quotedSchema: string): string {
  return `CREATE OR REPLACE FUNCTION ${quotedSchema}.outbox_notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('${INSERT_CHANNEL}', TG_TABLE_SCHEMA);
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER outbox_notify_insert
  AFTER INSERT ON ${quotedSchema}.outbox
  FOR EACH STATEMENT EXECUTE FUNCTION ${quotedSchema}.outbox_notify_insert();`;
}
