import pg from 'pg';
import { ConfigError, OutboxError } from '../shared/errors.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import type { DatabaseOptions } from '../shared/database.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { RELAY_COLUMNS } from '../shared/schema.js';
import { openDatabase } from './openDatabase.js';
import {
  DEBEZIUM_SETTINGS,
  DEBEZIUM_TRIGGER,
  resolveDebeziumOptions,
  triggerArguments,
  type ColumnKinds,
  type ResolvedDebeziumMapping,
} from './debeziumOptions.js';

// A Debezium-shaped outbox table feeding our outbox through the trigger function of
// sql/007_debezium_outbox.sql, as replaced by sql/008 (docs/debezium.md). The writers
// keep inserting into their table; the relay reads our outbox and needs nothing new.

/**
 * Options of {@link attachDebeziumOutbox} and {@link debeziumAttachScript}: where our
 * outbox is (`schema`), the Debezium table, and the event router options it was used
 * with. Defaults are the event router's.
 */
export interface DebeziumOutboxOptions extends DatabaseOptions {
  /** The Debezium-shaped table, `schema.table` (`table` alone: `public.table`). Required. */
  table: string;
  /** route.by.field: its value replaces `${routedByValue}` in `topicPattern` (default `aggregatetype`). */
  routeByColumn?: string;
  /** route.topic.replacement (default `outbox.event.${routedByValue}`); a fixed topic name sends every event there. */
  topicPattern?: string;
  /** table.field.event.key: the Kafka key (default `aggregateid`); text, varchar, uuid, smallint, integer, bigint or boolean. */
  keyColumn?: string;
  /** table.field.event.id: header `id`, and the message-id when a uuid (default `id`). */
  idColumn?: string;
  /** table.field.event.payload: the value; jsonb, json, text, varchar or bytea (default `payload`). */
  payloadColumn?: string;
  /** Sent as header `type` (default `type`); null for none. The event router sends it only when placed. */
  typeColumn?: string | null;
  /** table.field.event.timestamp: a timestamp column for the Kafka timestamp (default none: the insert's time). */
  timestampColumn?: string | null;
  /** table.fields.additional.placement, header placement only: `column:header:alias,...`. */
  additionalPlacement?: string;
  /**
   * route.tombstone.on.empty.payload (default false): an empty or blank text payload is a
   * tombstone; so is NULL, which without it is a tombstone with the string value
   * converter and `null` with the JSON one.
   */
  tombstoneOnEmptyPayload?: boolean;
  /**
   * The connector's key.converter (default `string`, StringConverter: the key as text;
   * `json`, JsonConverter with schemas.enable=false: a text key as a JSON string, NULL
   * as `null`). The key's bytes decide its partition, so match the connector's.
   */
  keyConverter?: 'string' | 'json';
  /**
   * The connector's value.converter (default `string`: StringConverter, or ByteArray /
   * BinaryData for a bytea payload, the payload as it is; `json`: JsonConverter with
   * schemas.enable=false, the payload as a JSON string, bytes as base64, NULL as `null`).
   */
  valueConverter?: 'string' | 'json';
  logger?: Logger;
}

/** What {@link attachDebeziumOutbox} did. */
export interface AttachDebeziumResult {
  /** The table, quoted, as `"schema"."table"`. */
  table: string;
  /** Name of the trigger on it. */
  trigger: string;
  /** True when the table had the trigger already (its settings are replaced). */
  replaced: boolean;
  /** The trigger's arguments, as the function reads them. */
  arguments: string[];
}

/** What {@link detachDebeziumOutbox} did. */
export interface DetachDebeziumResult {
  /** The table, quoted, as `"schema"."table"`. */
  table: string;
  /** False when the table had no trigger of ours. */
  detached: boolean;
}

const PAYLOAD_TYPES = ['jsonb', 'json', 'text', 'character varying', 'bytea'];
const TIMESTAMP_TYPES = ['timestamp without time zone', 'timestamp with time zone'];
// Key columns whose bytes the trigger writes as the connector did with either converter
// (test/debeziumJsonConverter.integration.test.ts). Others differ: Debezium sends numeric
// as a Decimal (base64 bytes with JsonConverter), temporal types as epoch numbers, json
// as a string, so their keys, and partitions, would change at the switch.
const KEY_TYPES = ['text', 'character varying', 'uuid', 'smallint', 'integer', 'bigint', 'boolean'];
// Our own tables: capturing one of them into the outbox would loop or make no sense.
const OWN_TABLES = [...Object.keys(RELAY_COLUMNS), 'outbox_migrations', 'outbox_claim_floors', 'processed_messages', 'entity_versions', 'effect_keys'];

/**
 * Postgres' "permission denied" / "must be owner" (42501) on creating or dropping the
 * trigger, with what the command needs; other errors as they are.
 */
function privilegeError(error: unknown, table: string, command: 'attach' | 'detach'): unknown {
  const e = error as { code?: string; message?: string };
  if (e.code !== '42501') return error;
  const schema = /permission denied for schema (\S+)/.exec(e.message ?? '')?.[1];
  const need = schema !== undefined
    ? `${command} needs USAGE on schema ${schema}, besides the privileges on ${table} (docs/debezium.md#privileges)`
    : /must be owner/.test(e.message ?? '')
    ? `replacing or dropping a trigger is for the owner of ${table} only (or a member of its role): run ${command} as that role, holding EXECUTE on outbox_debezium_capture, or GRANT the table owner's role to the role that ran migrate`
    : `${command} needs the TRIGGER privilege on ${table} and EXECUTE on outbox_debezium_capture: run it as the role that ran \`outbox-relay migrate\` (the function's owner) with GRANT TRIGGER ON ${table}`;
  return new OutboxError(`debezium ${command}: ${e.message ?? 'permission denied'}; ${need}`, { retriable: false, cause: error, context: { table } });
}

function sqlLiteral(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

function quotedTable(m: ResolvedDebeziumMapping): string {
  return `${quoteIdentifier(m.tableSchema, 'table')}.${quoteIdentifier(m.tableName, 'table')}`;
}

function triggerStatements(m: ResolvedDebeziumMapping, kinds: ColumnKinds): string[] {
  const table = quotedTable(m);
  const args = triggerArguments(m, kinds).map(sqlLiteral).join(', ');
  return [
    // Drop and create in one transaction: atomic for the writers (they wait on the
    // table's lock for a moment), and works on every Postgres version.
    `DROP TRIGGER IF EXISTS ${DEBEZIUM_TRIGGER} ON ${table}`,
    `CREATE TRIGGER ${DEBEZIUM_TRIGGER} AFTER INSERT ON ${table}\n  FOR EACH ROW EXECUTE FUNCTION ${quoteIdentifier(m.schema, 'schema')}.outbox_debezium_capture(${args})`,
  ];
}

function script(m: ResolvedDebeziumMapping, kinds: ColumnKinds): string {
  const [drop, create] = triggerStatements(m, kinds);
  return [
    `-- outbox-relay: events inserted into ${quotedTable(m)} also go into ${quoteIdentifier(m.schema, 'schema')}.outbox,`,
    '-- in the same transaction (docs/debezium.md). Trigger arguments: route-by column, topic pattern,',
    '-- key column, id column and kind, payload column and kind, timestamp column and kind,',
    '-- tombstone on empty payload, key and value converters, then (column, header) pairs.',
    '-- The kinds are the column types found now: print and apply the script again after',
    '-- changing the type of one of these columns.',
    'BEGIN;',
    `${drop};`,
    `${create};`,
    'COMMIT;',
    '',
  ].join('\n');
}

interface ColumnRow {
  name: string;
  type: string;
}

/** The table's oid and its columns' types (domains as their base type); undefined when there is no such table. */
async function tableColumns(db: pg.ClientBase | pg.Pool, m: ResolvedDebeziumMapping): Promise<{ oid: number; columns: Map<string, string> } | undefined> {
  const table = await db.query<{ oid: number }>(
    `SELECT c.oid FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
    [m.tableSchema, m.tableName],
  );
  if (!table.rows[0]) return undefined;
  const { rows } = await db.query<ColumnRow>(
    `SELECT a.attname AS name, format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END, NULL) AS type
       FROM pg_catalog.pg_attribute AS a JOIN pg_catalog.pg_type AS t ON t.oid = a.atttypid
      WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
    [table.rows[0].oid],
  );
  return { oid: table.rows[0].oid, columns: new Map(rows.map((r) => [r.name, r.type])) };
}

/**
 * Check a mapping against the table's columns (ConfigErrors naming the option) and
 * return how the trigger copies them.
 */
function checkColumns(m: ResolvedDebeziumMapping, columns: Map<string, string>, table: string): ColumnKinds {
  const listed = [...columns.keys()].join(', ');
  const need = (option: string, name: string, types?: readonly string[]): void => {
    const type = columns.get(name);
    if (type === undefined) throw new ConfigError(option, `column ${JSON.stringify(name)} does not exist in ${table} (its columns: ${listed})`);
    if (types && !types.includes(type)) {
      throw new ConfigError(option, `column ${JSON.stringify(name)} of ${table} is ${type}; supported: ${types.join(', ')}`);
    }
  };
  need('routeByColumn', m.routeByColumn);
  need('keyColumn', m.keyColumn, KEY_TYPES);
  need('idColumn', m.idColumn);
  need('payloadColumn', m.payloadColumn, PAYLOAD_TYPES);
  if (m.timestampColumn !== undefined) need('timestampColumn', m.timestampColumn, TIMESTAMP_TYPES);
  if (m.typeColumn !== undefined) need('typeColumn', m.typeColumn);
  for (const h of m.placements) need('additionalPlacement', h.column);
  const payload = columns.get(m.payloadColumn);
  return {
    id: columns.get(m.idColumn) === 'uuid' ? 'uuid' : 'other',
    payload: payload === 'jsonb' || payload === 'json' || payload === 'bytea' ? payload : 'text',
    timestamp: m.timestampColumn === undefined ? '' : columns.get(m.timestampColumn) === 'timestamp with time zone' ? 'tz' : 'utc',
  };
}

// Every option a call may take: the mapping's (DEBEZIUM_SETTINGS) and the connection's.
// detach takes the same, so one options object serves attach and detach.
const KNOWN_OPTIONS = new Set([...DEBEZIUM_SETTINGS.map((s) => s.option), 'schema', 'databaseUrl', 'client', 'pool', 'logger']);

/** A misspelt option (`topicPatern`) would silently take the router's default instead. */
function refuseUnknownOptions(options: object): void {
  if (typeof options !== 'object' || options === null) throw new ConfigError('options', 'must be an object');
  for (const key of Object.keys(options)) {
    if (!KNOWN_OPTIONS.has(key)) throw new ConfigError(key, `is not an option of the Debezium attach (${[...KNOWN_OPTIONS].join(', ')})`);
  }
}

/** Resolve the options, open the database, check the table: what attach and the script share. */
async function inspect<T>(
  options: DebeziumOutboxOptions,
  work: (client: pg.ClientBase, m: ResolvedDebeziumMapping, kinds: ColumnKinds, attachedTo: string | undefined) => Promise<T>,
): Promise<T> {
  refuseUnknownOptions(options);
  const m = resolveDebeziumOptions(options);
  const table = quotedTable(m);
  if (m.tableSchema === m.schema && OWN_TABLES.includes(m.tableName)) {
    throw new ConfigError('table', `${table} is one of outbox-relay's own tables; name the Debezium outbox table (put ours in its own schema if yours is also called outbox)`);
  }
  const { db, close } = await openDatabase({ ...options, schema: m.schema }, 'outbox-relay:debezium');
  try {
    const client = db instanceof pg.Pool ? await db.connect() : db;
    try {
      // The catalog only (by oid, not by name): print needs no privilege on the table's
      // schema, and attach's privilege errors come from CREATE TRIGGER, explained there.
      const found = await tableColumns(client, m);
      if (!found) throw new ConfigError('table', `table ${table} does not exist`);
      const kinds = checkColumns(m, found.columns, table);
      const existing = await client.query<{ schema: string }>(
        `SELECT pn.nspname AS schema
           FROM pg_catalog.pg_trigger AS tg
           JOIN pg_catalog.pg_proc AS p ON p.oid = tg.tgfoid
           JOIN pg_catalog.pg_namespace AS pn ON pn.oid = p.pronamespace
          WHERE tg.tgrelid = $1 AND tg.tgname = $2`,
        [found.oid, DEBEZIUM_TRIGGER],
      );
      const attachedTo = existing.rows[0]?.schema;
      if (attachedTo !== undefined && attachedTo !== m.schema) {
        throw new ConfigError('table', `${table} is attached to the outbox in schema ${JSON.stringify(attachedTo)}; detach it there first`);
      }
      return await work(client, m, kinds, attachedTo);
    } finally {
      if (db instanceof pg.Pool) (client as pg.PoolClient).release();
    }
  } finally {
    await close();
  }
}

/**
 * The SQL {@link attachDebeziumOutbox} would run, as one script for a DBA to read and
 * apply with psql (after `outbox-relay migrate`, as the role that ran it, which owns the
 * trigger function, holding the TRIGGER privilege on the table). It reads the database
 * (the catalog only; nothing is changed): the table and columns are checked as attach
 * checks them, and the columns' types go into the trigger's arguments. Applying it
 * again with other settings replaces them.
 *
 * @throws ConfigError naming the option at fault (see {@link attachDebeziumOutbox});
 *   SchemaError; ConnectionError
 */
export async function debeziumAttachScript(options: DebeziumOutboxOptions): Promise<string> {
  return inspect(options, async (_client, m, kinds) => script(m, kinds));
}

/**
 * Attach a Debezium-shaped outbox table (Debezium's outbox event router table: `id`,
 * `aggregatetype`, `aggregateid`, `type`, `payload`) to our outbox: every row inserted
 * into it from now on also goes into our outbox, in the writer's transaction, mapped as
 * the event router would route it (topic from the pattern, key, header `id`, payload as
 * the value; see docs/debezium.md). Writers change nothing and need no new grant; rows
 * inserted and deleted in one transaction are captured too. Attaching again with other
 * settings replaces them. Run it as the role that ran `migrate`, holding the TRIGGER
 * privilege on the table.
 *
 * @throws ConfigError naming the option when the table or a column is missing or of a
 *   type that cannot be mapped, or the table is attached to another schema's outbox;
 *   SchemaError when the outbox is not migrated to this version; ConnectionError
 */
export async function attachDebeziumOutbox(options: DebeziumOutboxOptions): Promise<AttachDebeziumResult> {
  const logger = options.logger ?? silentLogger();
  return inspect(options, async (client, m, kinds, attachedTo) => {
    const table = quotedTable(m);
    await client.query('BEGIN');
    try {
      for (const statement of triggerStatements(m, kinds)) await client.query(statement);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw privilegeError(error, table, 'attach');
    }
    const result = { table, trigger: DEBEZIUM_TRIGGER, replaced: attachedTo !== undefined, arguments: triggerArguments(m, kinds) };
    logger.info({ table, schema: m.schema, replaced: result.replaced }, 'attached Debezium outbox table');
    return result;
  });
}

/**
 * Remove the trigger {@link attachDebeziumOutbox} put on a table: its inserts stop going
 * into our outbox (rows already there are still published).
 *
 * @throws ConfigError when the table does not exist or its trigger feeds another
 *   schema's outbox; ConnectionError
 */
export async function detachDebeziumOutbox(options: Pick<DebeziumOutboxOptions, 'table' | 'client' | 'pool' | 'databaseUrl' | 'schema' | 'logger'>): Promise<DetachDebeziumResult> {
  refuseUnknownOptions(options);
  const m = resolveDebeziumOptions({ table: options.table, ...(options.schema !== undefined ? { schema: options.schema } : {}) });
  const logger = options.logger ?? silentLogger();
  const table = quotedTable(m);
  const { db, close } = await openDatabase({ ...options, schema: m.schema }, 'outbox-relay:debezium');
  try {
    const found = await db.query<{ oid: number | null }>(
      `SELECT c.oid FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
      [m.tableSchema, m.tableName],
    );
    if (found.rows[0]?.oid == null) throw new ConfigError('table', `table ${table} does not exist`);
    const existing = await db.query<{ schema: string }>(
      `SELECT pn.nspname AS schema
         FROM pg_catalog.pg_trigger AS tg
         JOIN pg_catalog.pg_proc AS p ON p.oid = tg.tgfoid
         JOIN pg_catalog.pg_namespace AS pn ON pn.oid = p.pronamespace
        WHERE tg.tgrelid = $1 AND tg.tgname = $2`,
      [found.rows[0].oid, DEBEZIUM_TRIGGER],
    );
    const owner = existing.rows[0]?.schema;
    if (owner === undefined) return { table, detached: false };
    if (owner !== m.schema) throw new ConfigError('table', `${table} feeds the outbox in schema ${JSON.stringify(owner)}, not ${JSON.stringify(m.schema)}`);
    await db.query(`DROP TRIGGER IF EXISTS ${DEBEZIUM_TRIGGER} ON ${table}`).catch((error: unknown) => {
      throw privilegeError(error, table, 'detach');
    });
    logger.info({ table, schema: m.schema }, 'detached Debezium outbox table');
    return { table, detached: true };
  } finally {
    await close();
  }
}
