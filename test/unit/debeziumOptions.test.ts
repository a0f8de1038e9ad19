import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../src/shared/errors.js';
import { readSetting } from '../../src/shared/settings.js';
import {
  DEBEZIUM_SETTINGS,
  debeziumAdditionalPlacement,
  debeziumTable,
  debeziumTombstoneOnEmptyPayload,
  debeziumTopicPattern,
  debeziumTypeColumn,
  parseAdditionalPlacement,
  resolveDebeziumOptions,
  topicPatternProblem,
  triggerArguments,
} from '../../src/commands/debeziumOptions.js';

function refused(options: Parameters<typeof resolveDebeziumOptions>[0], setting: string, message: RegExp): void {
  assert.throws(
    () => resolveDebeziumOptions(options),
    (e: unknown) => e instanceof ConfigError && e.setting === setting && message.test(e.message) && !e.retriable,
    `${setting} ${message}`,
  );
}

test("the event router's defaults apply, and the arguments follow sql/007's order", () => {
  const m = resolveDebeziumOptions({ table: 'app.outboxevent' });
  assert.deepEqual(m, {
    schema: 'public',
    tableSchema: 'app',
    tableName: 'outboxevent',
    routeByColumn: 'aggregatetype',
    topicPattern: 'outbox.event.${routedByValue}',
    keyColumn: 'aggregateid',
    idColumn: 'id',
    payloadColumn: 'payload',
    timestampColumn: undefined,
    tombstoneOnEmptyPayload: false,
    keyConverter: 'string',
    valueConverter: 'string',
    typeColumn: 'type',
    placements: [],
  });
  assert.deepEqual(triggerArguments(m, { id: 'uuid', payload: 'jsonb', timestamp: '' }), [
    'aggregatetype', 'outbox.event.${routedByValue}', 'aggregateid', 'id', 'uuid', 'payload', 'jsonb', '', '', 'false', 'string', 'string', 'type', 'type',
  ]);
  assert.equal(resolveDebeziumOptions({ table: 'outboxevent' }).tableSchema, 'public', 'a bare table name is in public');
});

test('typeColumn null sends no type header; placements follow it as (column, header) pairs', () => {
  const m = resolveDebeziumOptions({ table: 'a.b', typeColumn: null, additionalPlacement: 'type:header:eventType, tenant:header:tenant-id,region:header' });
  assert.equal(m.typeColumn, undefined);
  assert.deepEqual(m.placements, [
    { column: 'type', header: 'eventType' },
    { column: 'tenant', header: 'tenant-id' },
    { column: 'region', header: 'region' },
  ]);
  assert.deepEqual(triggerArguments(m, { id: 'other', payload: 'text', timestamp: 'utc' }).slice(12), ['type', 'eventType', 'tenant', 'tenant-id', 'region', 'region']);
});

test('placements other than header are refused with the reason; malformed ones too', () => {
  refused({ table: 'a.b', additionalPlacement: 'type:envelope:eventType' }, 'additionalPlacement', /placement envelope is not supported, only header/);
  refused({ table: 'a.b', additionalPlacement: 'p:partition' }, 'additionalPlacement', /placement partition is not supported.*per-key order/);
  refused({ table: 'a.b', additionalPlacement: 'x:headers' }, 'additionalPlacement', /"headers" is not header, envelope or partition/);
  refused({ table: 'a.b', additionalPlacement: 'x' }, 'additionalPlacement', /not column:placement/);
  refused({ table: 'a.b', additionalPlacement: 'x:header:a:b' }, 'additionalPlacement', /not column:placement/);
  refused({ table: 'a.b', additionalPlacement: 'x";--:header' }, 'additionalPlacement', /column .* is not a valid name/);
  refused({ table: 'a.b', additionalPlacement: "x:header:it's" }, 'additionalPlacement', /header name "it's" is not 1-255 of/);
  refused({ table: 'a.b', additionalPlacement: 'x:header:message-id' }, 'additionalPlacement', /set by outbox-relay itself/);
  refused({ table: 'a.b', additionalPlacement: 'x:header:id' }, 'additionalPlacement', /set by outbox-relay itself/);
  refused({ table: 'a.b', additionalPlacement: 'kind:header:type' }, 'additionalPlacement', /already the type column.*--type-column none/);
  refused({ table: 'a.b', additionalPlacement: 'x:header:h,y:header:h' }, 'additionalPlacement', /"h" is placed twice/);
  assert.deepEqual(parseAdditionalPlacement(''), { value: [] });
});

test('topic patterns: the placeholder or a fixed legal name', () => {
  assert.equal(topicPatternProblem('outbox.event.${routedByValue}'), undefined);
  assert.equal(topicPatternProblem('${routedByValue}'), undefined);
  assert.equal(topicPatternProblem('all-events'), undefined, 'a fixed topic');
  assert.match(topicPatternProblem('events/${routedByValue}') ?? '', /does not give a legal Kafka topic name/);
  assert.match(topicPatternProblem('${aggregate}.events') ?? '', /has no \$\{routedByValue\}/);
  assert.match(topicPatternProblem('x'.repeat(240) + '${routedByValue}' + 'y'.repeat(10)) ?? '', /legal/);
  refused({ table: 'a.b', topicPattern: '' }, 'topicPattern', /is required/);
  refused({ table: 'a.b', topicPattern: 'a b' }, 'topicPattern', /not a legal Kafka topic name/);
});

test('names are plain identifiers, checked with the option named', () => {
  refused({ table: '' }, 'table', /is required/);
  refused({} as { table: string }, 'table', /is required/);
  refused({ table: 'a.b.c' }, 'table', /not schema.table/);
  refused({ table: 'app.outbox"; drop' }, 'table', /not a valid name/);
  refused({ table: 'a.b', schema: 'x-y' }, 'schema', /not a valid name/);
  refused({ table: 'a.b', routeByColumn: '1x' }, 'routeByColumn', /not a valid name/);
  refused({ table: 'a.b', keyColumn: '' }, 'keyColumn', /not a valid name/);
  refused({ table: 'a.b', idColumn: 'a b' }, 'idColumn', /not a valid name/);
  refused({ table: 'a.b', payloadColumn: 'p;' }, 'payloadColumn', /not a valid name/);
  refused({ table: 'a.b', typeColumn: 'a-b' }, 'typeColumn', /not a valid name/);
  refused({ table: 'a.b', timestampColumn: 'a-b' }, 'timestampColumn', /not a valid name/);
  refused({ table: 'a.b', tombstoneOnEmptyPayload: 'yes' as unknown as boolean }, 'tombstoneOnEmptyPayload', /not true or false/);
  refused({ table: 'a.b', keyConverter: 'avro' as 'json' }, 'keyConverter', /one of string, json/);
  refused({ table: 'a.b', valueConverter: 'bytes' as 'json' }, 'valueConverter', /one of string, json/);
  assert.deepEqual(
    triggerArguments(resolveDebeziumOptions({ table: 'a.b', keyConverter: 'json', valueConverter: 'json' }), { id: 'uuid', payload: 'jsonb', timestamp: '' }).slice(10, 12),
    ['json', 'json'],
  );
  assert.equal(resolveDebeziumOptions({ table: 'a.b', timestampColumn: 'created_at' }).timestampColumn, 'created_at');
  assert.equal(resolveDebeziumOptions({ table: 'a.b', timestampColumn: null }).timestampColumn, undefined);
});

test('the CLI settings read flags and environment, with the router defaults', () => {
  assert.equal(readSetting(debeziumTable, undefined, { OUTBOX_DEBEZIUM_TABLE: 'app.outboxevent' }), 'app.outboxevent');
  assert.equal(readSetting(debeziumTable, undefined, {}), undefined, 'required: no default');
  assert.throws(() => readSetting(debeziumTable, 'a.b.c', {}), (e: ConfigError) => e.setting === '--table');
  assert.equal(readSetting(debeziumTopicPattern, undefined, {}), 'outbox.event.${routedByValue}');
  assert.throws(() => readSetting(debeziumTopicPattern, 'x/${routedByValue}', {}), (e: ConfigError) => e.setting === '--topic-pattern');
  assert.equal(readSetting(debeziumTypeColumn, undefined, {}), 'type');
  assert.equal(readSetting(debeziumTypeColumn, 'none', {}), '', "'none': no type header");
  assert.equal(readSetting(debeziumTypeColumn, 'event_type', {}), 'event_type');
  assert.equal(readSetting(debeziumTombstoneOnEmptyPayload, 'true', {}), true);
  assert.throws(() => readSetting(debeziumAdditionalPlacement, 'a:envelope', {}), (e: ConfigError) => e.setting === '--additional-placement' && /envelope is not supported/.test(e.message));
  // What the CLI reads goes straight into the library's options.
  const o: Record<string, unknown> = {};
  for (const s of DEBEZIUM_SETTINGS) o[s.option] = readSetting(s as never, undefined, { OUTBOX_DEBEZIUM_TABLE: 'app.events' });
  assert.equal(resolveDebeziumOptions(o as { table: string }).tableName, 'events');
  assert.equal(new Set(DEBEZIUM_SETTINGS.map((s) => s.flag)).size, DEBEZIUM_SETTINGS.length);
});
