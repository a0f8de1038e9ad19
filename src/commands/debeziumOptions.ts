import { ConfigError } from '../shared/errors.js';
import { DEFAULT_SCHEMA, identifierProblem, schemaNameProblem } from '../shared/identifiers.js';
import { topicNameProblem } from '../shared/kafkaNames.js';
import { HEADERS } from '../shared/kafka.js';
import { boolean, checkedText, choice, optionValue, type Setting, type SettingDescriptor } from '../shared/settings.js';

// Settings of `outbox-relay debezium attach|detach|print` (src/commands/debeziumOutbox.ts,
// docs/debezium.md). Named after the event router options they stand for; defaults are
// the router's. Library options are checked with optionValue(), the CLI reads the same
// objects, so both accept the same values.

/** The placeholder of route.topic.replacement that the route-by column's value replaces. */
const ROUTED_BY_VALUE = '${routedByValue}';

/** Name of the trigger `attach` puts on a Debezium-shaped table. */
export const DEBEZIUM_TRIGGER = 'outbox_relay_debezium';

/** Header names the trigger or the relay set themselves, which a placed column may not take. */
const RESERVED_HEADERS: readonly string[] = ['id', HEADERS.messageId, HEADERS.outboxId, HEADERS.contentType];

function column(d: SettingDescriptor & { defaultValue: string }): Setting<string> {
  return checkedText({ ...d, check: (v) => identifierProblem(v) });
}

/** `schema.table`, or `table` in public, each part a plain identifier; the problem, or undefined. */
function tableNameProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value === '') return 'is required: the Debezium outbox table, as schema.table';
  const parts = value.split('.');
  if (parts.length > 2) return `${JSON.stringify(value)} is not schema.table`;
  for (const part of parts) {
    const problem = identifierProblem(part);
    if (problem) return problem;
  }
  return undefined;
}

/** The Debezium table, `schema.table` (`table` alone means public.table). Required. */
export const debeziumTable = checkedText({
  option: 'table',
  flag: '--table',
  env: 'OUTBOX_DEBEZIUM_TABLE',
  description: 'The Debezium-shaped outbox table the writers insert into, as schema.table.',
  defaultValue: undefined,
  check: tableNameProblem,
});

const debeziumRouteByColumn = column({
  option: 'routeByColumn',
  flag: '--route-by-column',
  env: 'OUTBOX_DEBEZIUM_ROUTE_BY_COLUMN',
  description: 'Column whose value replaces ${routedByValue} in the topic pattern (route.by.field).',
  defaultValue: 'aggregatetype',
});

/** What is wrong with a topic pattern, or undefined. */
export function topicPatternProblem(value: unknown): string | undefined {
  if (typeof value !== 'string' || value === '') return 'is required';
  // Any legal value of the column must be able to give a legal name: check the pattern
  // with a one-letter value. Values that make it illegal are dead-lettered by the relay.
  const problem = topicNameProblem(value.replaceAll(ROUTED_BY_VALUE, 'x'));
  if (problem === undefined) return undefined;
  return value.includes(ROUTED_BY_VALUE)
    ? `${JSON.stringify(value)} does not give a legal Kafka topic name with ${ROUTED_BY_VALUE} filled in (1-249 of A-Z a-z 0-9 . _ -; no other placeholders)`
    : `${JSON.stringify(value)} has no ${ROUTED_BY_VALUE} and is not a legal Kafka topic name itself (1-249 of A-Z a-z 0-9 . _ -)`;
}

export const debeziumTopicPattern = checkedText({
  option: 'topicPattern',
  flag: '--topic-pattern',
  env: 'OUTBOX_DEBEZIUM_TOPIC_PATTERN',
  description: 'Topic of each event, ${routedByValue} replaced by the route-by column (route.topic.replacement); a fixed name sends every event there.',
  defaultValue: `outbox.event.${ROUTED_BY_VALUE}`,
  check: topicPatternProblem,
});

const debeziumKeyColumn = column({
  option: 'keyColumn',
  flag: '--key-column',
  env: 'OUTBOX_DEBEZIUM_KEY_COLUMN',
  description: 'Column that becomes the Kafka key (table.field.event.key).',
  defaultValue: 'aggregateid',
});

const debeziumIdColumn = column({
  option: 'idColumn',
  flag: '--id-column',
  env: 'OUTBOX_DEBEZIUM_ID_COLUMN',
  description: 'Column of the event id, sent as header id and, when a uuid, as message-id (table.field.event.id).',
  defaultValue: 'id',
});

const debeziumPayloadColumn = column({
  option: 'payloadColumn',
  flag: '--payload-column',
  env: 'OUTBOX_DEBEZIUM_PAYLOAD_COLUMN',
  description: 'Column of the message value: jsonb, json, text, varchar or bytea (table.field.event.payload).',
  defaultValue: 'payload',
});

function optionalColumn(value: string): string | undefined {
  return value === '' ? undefined : identifierProblem(value);
}

export const debeziumTypeColumn = checkedText({
  option: 'typeColumn',
  flag: '--type-column',
  env: 'OUTBOX_DEBEZIUM_TYPE_COLUMN',
  description: "Column sent as header type (the event router sends it only when placed; we do by default); 'none' for no type header.",
  defaultValue: 'type',
  normalize: (v) => (v.toLowerCase() === 'none' ? '' : v),
  check: optionalColumn,
});

const debeziumTimestampColumn = checkedText({
  option: 'timestampColumn',
  flag: '--timestamp-column',
  env: 'OUTBOX_DEBEZIUM_TIMESTAMP_COLUMN',
  description: 'Timestamp column that becomes the Kafka timestamp (table.field.event.timestamp); default the time of the insert.',
  defaultValue: '',
  check: optionalColumn,
});

/** One column placed as a header. */
export interface HeaderPlacement {
  column: string;
  header: string;
}

/**
 * Parse table.fields.additional.placement (`column:header[:alias],...`). Only `header`
 * is supported: `envelope` would wrap the payload in a struct the relay does not build,
 * `partition` would choose partitions by something other than the key.
 *
 * @returns the placements, or a problem description
 */
export function parseAdditionalPlacement(value: string): { value: HeaderPlacement[] } | { problem: string } {
  const placements: HeaderPlacement[] = [];
  if (value.trim() === '') return { value: placements };
  for (const raw of value.split(',')) {
    const entry = raw.trim();
    const parts = entry.split(':').map((p) => p.trim());
    const [columnName = '', placement = '', alias] = parts;
    if (parts.length < 2 || parts.length > 3 || columnName === '') {
      return { problem: `${JSON.stringify(entry)} is not column:placement or column:placement:alias` };
    }
    const columnProblem = identifierProblem(columnName);
    if (columnProblem) return { problem: `${JSON.stringify(entry)}: column ${columnProblem}` };
    if (placement === 'envelope' || placement === 'partition') {
      return {
        problem: `${JSON.stringify(entry)}: placement ${placement} is not supported, only header (${
          placement === 'envelope' ? 'the value is the payload as it is, never an envelope' : 'the partition follows the key, for per-key order'
        }); see docs/debezium.md`,
      };
    }
    if (placement !== 'header') return { problem: `${JSON.stringify(entry)}: placement ${JSON.stringify(placement)} is not header, envelope or partition` };
    const header = alias ?? columnName;
    // Narrower than Kafka allows, so a name never needs quoting in the trigger's arguments.
    if (!/^[A-Za-z0-9._-]{1,255}$/.test(header)) {
      return { problem: `${JSON.stringify(entry)}: header name ${JSON.stringify(header)} is not 1-255 of A-Z a-z 0-9 . _ -` };
    }
    placements.push({ column: columnName, header });
  }
  return { value: placements };
}

export const debeziumAdditionalPlacement = checkedText({
  option: 'additionalPlacement',
  flag: '--additional-placement',
  env: 'OUTBOX_DEBEZIUM_ADDITIONAL_PLACEMENT',
  description: 'More columns sent as headers, column:header:name,... (table.fields.additional.placement; header placement only).',
  defaultValue: '',
  check: (v) => {
    if (typeof v !== 'string') return 'is not text';
    const parsed = parseAdditionalPlacement(v);
    return 'problem' in parsed ? parsed.problem : undefined;
  },
});

export const debeziumTombstoneOnEmptyPayload = boolean({
  option: 'tombstoneOnEmptyPayload',
  flag: '--tombstone-on-empty-payload',
  env: 'OUTBOX_DEBEZIUM_TOMBSTONE_ON_EMPTY_PAYLOAD',
  description: 'An empty or blank text payload, and with the JSON value converter a NULL one, is sent as a tombstone (route.tombstone.on.empty.payload); with the string converter a NULL payload always is.',
  defaultValue: false,
});

/** Kafka Connect converters whose bytes the relay can reproduce. */
export type DebeziumConverter = 'string' | 'json';

const debeziumKeyConverter = choice<DebeziumConverter>({
  option: 'keyConverter',
  flag: '--key-converter',
  env: 'OUTBOX_DEBEZIUM_KEY_CONVERTER',
  description: "The connector's key.converter: string (StringConverter: the key as text) or json (JsonConverter, schemas.enable=false: a text key as a JSON string, NULL as null). Keys, and so partitions, stay as they were.",
  defaultValue: 'string',
  choices: ['string', 'json'],
});

const debeziumValueConverter = choice<DebeziumConverter>({
  option: 'valueConverter',
  flag: '--value-converter',
  env: 'OUTBOX_DEBEZIUM_VALUE_CONVERTER',
  description: "The connector's value.converter: string (StringConverter, or ByteArray/BinaryData for bytea: the payload as it is) or json (JsonConverter, schemas.enable=false: the payload as a JSON string, NULL as null).",
  defaultValue: 'string',
  choices: ['string', 'json'],
});

/** The settings of `debezium attach` and `print`, in help order (besides database URL, schema, log level). */
export const DEBEZIUM_SETTINGS = [
  debeziumTable,
  debeziumRouteByColumn,
  debeziumTopicPattern,
  debeziumKeyColumn,
  debeziumIdColumn,
  debeziumPayloadColumn,
  debeziumTypeColumn,
  debeziumTimestampColumn,
  debeziumAdditionalPlacement,
  debeziumTombstoneOnEmptyPayload,
  debeziumKeyConverter,
  debeziumValueConverter,
] as const;

/** How a Debezium-shaped table maps to outbox rows; see {@link resolveDebeziumOptions}. */
export interface DebeziumMapping {
  /** Router options, as the library takes them. */
  table?: string;
  routeByColumn?: string;
  topicPattern?: string;
  keyColumn?: string;
  idColumn?: string;
  payloadColumn?: string;
  typeColumn?: string | null;
  timestampColumn?: string | null;
  additionalPlacement?: string;
  tombstoneOnEmptyPayload?: boolean;
  keyConverter?: DebeziumConverter;
  valueConverter?: DebeziumConverter;
}

/** A validated mapping: everything the trigger needs. */
export interface ResolvedDebeziumMapping {
  /** Where our outbox is. */
  schema: string;
  tableSchema: string;
  tableName: string;
  routeByColumn: string;
  topicPattern: string;
  keyColumn: string;
  idColumn: string;
  payloadColumn: string;
  /** undefined: no timestamp column (the time of the insert). */
  timestampColumn: string | undefined;
  tombstoneOnEmptyPayload: boolean;
  keyConverter: DebeziumConverter;
  valueConverter: DebeziumConverter;
  /** Sent as header `type`; undefined for none. */
  typeColumn: string | undefined;
  /** The additional placements (header only). */
  placements: HeaderPlacement[];
}

/**
 * Check a mapping and apply the event router's defaults.
 *
 * @throws ConfigError naming the option at fault
 */
export function resolveDebeziumOptions(options: DebeziumMapping & { schema?: string }): ResolvedDebeziumMapping {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const schemaProblem = schemaNameProblem(schema);
  if (schemaProblem) throw new ConfigError('schema', schemaProblem);
  const table = optionValue(debeziumTable, options.table);
  const [tableSchema, tableName] = table.includes('.') ? (table.split('.') as [string, string]) : ['public', table];
  const typeColumn = optionValue(debeziumTypeColumn, options.typeColumn === null ? '' : options.typeColumn);
  const timestampColumn = optionValue(debeziumTimestampColumn, options.timestampColumn === null ? '' : options.timestampColumn);
  const placements = parseAdditionalPlacement(optionValue(debeziumAdditionalPlacement, options.additionalPlacement));
  if ('problem' in placements) throw new ConfigError('additionalPlacement', placements.problem);
  const headers: HeaderPlacement[] = typeColumn === '' ? [] : [{ column: typeColumn, header: 'type' }];
  for (const p of placements.value) {
    if (RESERVED_HEADERS.includes(p.header)) {
      throw new ConfigError('additionalPlacement', `header ${JSON.stringify(p.header)} is set by outbox-relay itself (${RESERVED_HEADERS.join(', ')}); give the column another alias`);
    }
    if (headers.some((h) => h.header === p.header)) {
      throw new ConfigError(
        'additionalPlacement',
        p.header === 'type' && typeColumn !== ''
          ? `header "type" is already the type column (${typeColumn}); set typeColumn to null (--type-column none) to place it yourself`
          : `header ${JSON.stringify(p.header)} is placed twice`,
      );
    }
    headers.push(p);
  }
  return {
    schema,
    tableSchema,
    tableName,
    routeByColumn: optionValue(debeziumRouteByColumn, options.routeByColumn),
    topicPattern: optionValue(debeziumTopicPattern, options.topicPattern),
    keyColumn: optionValue(debeziumKeyColumn, options.keyColumn),
    idColumn: optionValue(debeziumIdColumn, options.idColumn),
    payloadColumn: optionValue(debeziumPayloadColumn, options.payloadColumn),
    timestampColumn: timestampColumn === '' ? undefined : timestampColumn,
    tombstoneOnEmptyPayload: optionValue(debeziumTombstoneOnEmptyPayload, options.tombstoneOnEmptyPayload),
    keyConverter: optionValue(debeziumKeyConverter, options.keyConverter),
    valueConverter: optionValue(debeziumValueConverter, options.valueConverter),
    typeColumn: typeColumn === '' ? undefined : typeColumn,
    placements: placements.value,
  };
}

/** How the trigger copies the id, payload and timestamp columns: decided by their types at attach. */
export interface ColumnKinds {
  /** `uuid`: the id is the message-id; `other`: a uuid is derived from table and id. */
  id: 'uuid' | 'other';
  payload: 'jsonb' | 'json' | 'text' | 'bytea';
  /** `utc`: timestamp without time zone, read as UTC; `tz`: timestamptz; '' no column. */
  timestamp: 'utc' | 'tz' | '';
}

/** The trigger arguments of sql/007_debezium_outbox.sql (and 008, which reads the same) for a mapping, in order. */
export function triggerArguments(m: ResolvedDebeziumMapping, kinds: ColumnKinds): string[] {
  return [
    m.routeByColumn,
    m.topicPattern,
    m.keyColumn,
    m.idColumn,
    kinds.id,
    m.payloadColumn,
    kinds.payload,
    m.timestampColumn ?? '',
    kinds.timestamp,
    String(m.tombstoneOnEmptyPayload),
    m.keyConverter,
    m.valueConverter,
    ...(m.typeColumn === undefined ? [] : [m.typeColumn, 'type']),
    ...m.placements.flatMap((h) => [h.column, h.header]),
  ];
}
