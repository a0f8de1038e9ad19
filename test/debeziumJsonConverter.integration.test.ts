import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay } from '../src/relay/relay.js';
import { attachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';
import { migrate } from '../src/commands/migrate.js';
import { loadMigrations } from '../src/shared/schema.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { readTopic, testBrokers, testKafka } from './helpers/kafka.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { waitFor } from './helpers/wait.js';
import { jsonConverter, type ProbeCase, type ProbeKind } from './helpers/jsonConverterProbe.js';
import { mulberry32 } from './faults/schedule.js';

// The Debezium trigger with --key-converter json --value-converter json against Kafka
// Connect's own org.apache.kafka.connect.json.JsonConverter (schemas.enable=false) and
// Kafka's own partitioner hash (org.apache.kafka.common.utils.Utils), byte for byte: a
// few thousand generated events (seeded) of every key and payload type the trigger
// maps, with the characters where Jackson and Postgres write JSON differently. What the
// converter is given is what Debezium's Postgres connector and event router hand it:
// the column's value as logical decoding gives it (read back from the table here), with
// the column's Connect schema; the router's own tombstone (route.tombstone.on.empty.
// payload on a blank or NULL payload) has neither schema nor value.

const PARTITIONS = 7;
const SEED = 19;

let db: TestSchema;
let app: string;

before(async () => {
  db = await createTestSchema('dbzjc');
  app = `${db.schema}_app`;
  await db.pool.query(`CREATE SCHEMA "${app}"`);
});

after(async () => {
  await db.pool.query(`DROP SCHEMA IF EXISTS "${app}" CASCADE`).catch(() => undefined);
  await db.drop();
});

/** The fault suite's seeded generator (mulberry32): the same cases on every run. */
const random = mulberry32;
const rnd = random(SEED);
const int = (n: number): number => Math.floor(rnd() * n);
const pick = <T>(items: readonly T[]): T => items[int(items.length)]!;

// Characters Jackson and Postgres both write plainly, the escapes both write alike, and
// the ones they write differently (other control characters, beyond the BMP).
const PIECES = [
  'a', 'Z', '0', '9', ' ', '-', '.', "'", '{', '}', '[', ':', ',', 'null', '${routedByValue}',
  '"', '\\', '/', '\\u0041', '\n', '\t', '\r', '\b', '\f',
  '\u0001', '\u0007', '\u000b', '\u000e', '\u001b', '\u001f', '\u007f', '\u0080', '\u00a0',
  'é', 'ß', '中', '\u2028', '\u2029', '\ufeff', '\uffff',
  '🚀', '𝄞', '😀', '\u{10000}', '\u{10ffff}',
];
function text(maxPieces: number): string {
  let s = '';
  for (let n = int(maxPieces + 1); n > 0; n -= 1) s += pick(PIECES);
  return s;
}

const NUMBERS = ['0', '-0', '1', '-1', '42', '9223372036854775807', '-9223372036854775809', '123456789012345678901234567890',
  '1.5', '1.50', '-0.0', '0.000001', '1e3', '1E+2', '2.5E-7', '-1.0e-10', '6.02214076e23', '1e-400'];
function number(): string {
  if (rnd() < 0.5) return pick(NUMBERS);
  const digits = String(int(1_000_000_000)) + (rnd() < 0.3 ? String(int(1_000_000_000)) : '');
  return (rnd() < 0.3 ? '-' : '') + digits + (rnd() < 0.4 ? `.${int(1000)}` : '') + (rnd() < 0.3 ? `e${pick(['', '+', '-'])}${int(30)}` : '');
}
/** A JSON document as text; `ws` puts whitespace between tokens (json keeps it, jsonb does not). */
function json(depth: number, ws: boolean): string {
  const sp = (): string => (ws ? pick(['', ' ', '  ', '\n', '\t ', '\r\n']) : '');
  const r = rnd();
  if (depth <= 0 || r < 0.35) {
    const leaf = rnd();
    if (leaf < 0.35) return number();
    if (leaf < 0.75) return JSON.stringify(text(8));
    return pick(['true', 'false', 'null', '""']);
  }
  if (r < 0.7) {
    const n = int(4);
    const fields = Array.from({ length: n }, () => `${sp()}${JSON.stringify(text(4))}${sp()}:${sp()}${json(depth - 1, ws)}${sp()}`);
    return `{${fields.join(',')}${n === 0 ? sp() : ''}}`;
  }
  const items = Array.from({ length: int(4) }, () => `${sp()}${json(depth - 1, ws)}${sp()}`);
  return `[${items.join(',')}]`;
}

type PayloadType = 'jsonb' | 'json' | 'text' | 'bytea';
interface Table {
  name: string;
  keyType: string;
  keyKind: ProbeKind;
  payloadType: PayloadType;
  tombstoneOnEmptyPayload: boolean;
  rows: number;
}
const TABLES: Table[] = [
  { name: 'k_text_jsonb', keyType: 'text', keyKind: 'string', payloadType: 'jsonb', tombstoneOnEmptyPayload: false, rows: 600 },
  { name: 'k_varchar_json', keyType: 'varchar(255)', keyKind: 'string', payloadType: 'json', tombstoneOnEmptyPayload: false, rows: 500 },
  { name: 'k_text_text', keyType: 'text', keyKind: 'string', payloadType: 'text', tombstoneOnEmptyPayload: false, rows: 500 },
  { name: 'k_text_bytea', keyType: 'text', keyKind: 'string', payloadType: 'bytea', tombstoneOnEmptyPayload: false, rows: 300 },
  { name: 'k_text_text_tomb', keyType: 'text', keyKind: 'string', payloadType: 'text', tombstoneOnEmptyPayload: true, rows: 300 },
  { name: 'k_text_jsonb_tomb', keyType: 'text', keyKind: 'string', payloadType: 'jsonb', tombstoneOnEmptyPayload: true, rows: 200 },
  { name: 'k_bigint_jsonb', keyType: 'bigint', keyKind: 'int64', payloadType: 'jsonb', tombstoneOnEmptyPayload: false, rows: 250 },
  { name: 'k_int_text', keyType: 'integer', keyKind: 'int32', payloadType: 'text', tombstoneOnEmptyPayload: false, rows: 150 },
  { name: 'k_smallint_json', keyType: 'smallint', keyKind: 'int16', payloadType: 'json', tombstoneOnEmptyPayload: false, rows: 150 },
  { name: 'k_uuid_bytea', keyType: 'uuid', keyKind: 'uuid', payloadType: 'bytea', tombstoneOnEmptyPayload: false, rows: 150 },
  { name: 'k_bool_jsonb', keyType: 'boolean', keyKind: 'boolean', payloadType: 'jsonb', tombstoneOnEmptyPayload: false, rows: 100 },
];

function key(t: Table): string | null {
  if (rnd() < 0.04) return null;
  switch (t.keyKind) {
    case 'string': return rnd() < 0.04 ? '' : text(6);
    case 'int64': return pick(['9223372036854775807', '-9223372036854775808', '0', String(int(2 ** 31) - 2 ** 30), `${int(9_000_000)}${int(1_000_000_000)}`]);
    case 'int32': return pick(['2147483647', '-2147483648', String(int(2 ** 31) - 2 ** 30)]);
    case 'int16': return pick(['32767', '-32768', String(int(65536) - 32768)]);
    case 'uuid': return crypto.randomUUID();
    default: return pick(['true', 'false']);
  }
}

function payload(t: Table): string | Buffer | null {
  const r = rnd();
  if (r < 0.08) return null;
  if (t.payloadType === 'bytea') return r < 0.12 ? Buffer.alloc(0) : Buffer.from(Array.from({ length: int(90) }, () => int(256)));
  if (r < 0.14) return t.payloadType === 'text' ? pick(['null', '', ' ', '\t\n ']) : 'null';
  if (t.payloadType === 'text') return text(12);
  if (t.payloadType === 'jsonb') return json(3, false);
  // json keeps its text as written, whitespace around the document included.
  const around = (): string => (rnd() < 0.2 ? pick([' ', '\n', '\t', '  \r\n']) : '');
  return around() + json(3, true) + around();
}

test('integration: with the JSON converters, every key and value is byte for byte what Kafka Connect\'s JsonConverter writes, and every record is on the partition Kafka\'s partitioner gives those key bytes', async () => {
  const topic = uniqueName('dbzjc').replaceAll('_', '-');
  const admin = testKafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true });
  await admin.disconnect();

  for (const t of TABLES) {
    const table = `${app}.${t.name}`;
    await db.pool.query(`CREATE TABLE "${app}"."${t.name}" (id uuid PRIMARY KEY, aggregatetype text, aggregateid ${t.keyType}, type text, payload ${t.payloadType})`);
    await attachDebeziumOutbox({
      databaseUrl: db.databaseUrl, schema: db.schema, table, topicPattern: topic,
      keyConverter: 'json', valueConverter: 'json', tombstoneOnEmptyPayload: t.tombstoneOnEmptyPayload,
    });
    for (let done = 0; done < t.rows; done += 100) {
      const n = Math.min(100, t.rows - done);
      const params: unknown[] = [];
      const values = Array.from({ length: n }, () => {
        params.push(crypto.randomUUID(), key(t), payload(t));
        const p = params.length;
        return `($${p - 2}, 'x', $${p - 1}, 'T', $${p})`;
      });
      await db.pool.query(`INSERT INTO "${app}"."${t.name}" (id, aggregatetype, aggregateid, type, payload) VALUES ${values.join(', ')}`, params);
    }
  }

  // What the connector reads: the columns as Postgres writes them (jsonb_out, json as
  // written, text, bytes), so a jsonb's numbers and key order are Postgres' own.
  const events: Array<{ id: string; key: ProbeCase; value: ProbeCase }> = [];
  for (const t of TABLES) {
    const { rows } = await db.pool.query<{ id: string; k: string | null; p: string | null }>(
      `SELECT id::text AS id, aggregateid::text AS k, ${t.payloadType === 'bytea' ? "encode(payload, 'base64')" : 'payload::text'} AS p FROM "${app}"."${t.name}"`,
    );
    for (const row of rows) {
      const value: string | Buffer | null = t.payloadType === 'bytea' && row.p !== null ? Buffer.from(row.p, 'base64') : row.p;
      // The event router's delete event: NULL, or a string blank after Java's trim().
      const empty = value === null || (typeof value === 'string' && /^[\u0000-\u0020]*$/.test(value));
      const kind: ProbeKind = t.payloadType === 'bytea' ? 'bytes' : t.payloadType === 'text' ? 'string' : 'json';
      events.push({
        id: row.id,
        key: { kind: t.keyKind, value: row.k },
        value: empty && t.tombstoneOnEmptyPayload ? { kind: 'none', value: null } : { kind, value },
      });
    }
  }
  const keys = jsonConverter(events.map((e) => e.key), PARTITIONS);
  const values = jsonConverter(events.map((e) => e.value), PARTITIONS);

  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 500 });
  await relay.start();
  let messages;
  try {
    // Every row published, dead-lettered or waiting behind a dead letter of its key (a
    // key the relay refuses must show as a difference below, not as a wait that never
    // ends), then every published one read.
    const sent = await waitFor('every event published, dead-lettered or parked', async () => {
      const { rows } = await db.pool.query<{ sent: number; waiting: number }>(
        `SELECT count(*) FILTER (WHERE sent_at IS NOT NULL)::int AS sent,
                count(*) FILTER (WHERE sent_at IS NULL AND NOT EXISTS (
                  SELECT 1 FROM "${db.schema}".outbox_parked_keys AS p WHERE p.topic = o.topic AND p.key = o.key))::int AS waiting
           FROM "${db.schema}".outbox AS o`,
      );
      return rows[0]!.waiting === 0 ? rows[0] : undefined;
    });
    messages = await readTopic(topic, (m) => m.length >= sent.sent);
  } finally {
    await relay.stop();
  }
  const byId = new Map(messages.map((m) => [m.headers.id, m]));

  const wrong: string[] = [];
  const seen = { nonBmpKey: 0, controlKey: 0, nullKey: 0, nullValue: 0, jsonNullValue: 0, tombstone: 0 };
  for (const [i, e] of events.entries()) {
    const m = byId.get(e.id);
    const k = keys[i]!;
    const v = values[i]!;
    if (!m) {
      wrong.push(`${e.id}: not published`);
      continue;
    }
    // The key's bytes are UTF-8 (Jackson writes ASCII escapes and UTF-8), so the text
    // the reader decoded gives the bytes back.
    const actualKey = m.key === null ? null : Buffer.from(m.key, 'utf8');
    if (k.bytes === null || actualKey === null || !actualKey.equals(k.bytes)) {
      wrong.push(`${e.id}: key ${JSON.stringify(m.key)}, JsonConverter ${JSON.stringify(k.bytes?.toString('utf8'))}`);
    } else if (m.partition !== k.partition) {
      wrong.push(`${e.id}: key ${m.key} on partition ${m.partition}, Kafka's partitioner ${k.partition}`);
    }
    if (v.bytes === null ? m.value !== null : m.value === null || !m.value.equals(v.bytes)) {
      wrong.push(`${e.id}: value ${JSON.stringify(m.value?.toString('utf8') ?? null)}, JsonConverter ${JSON.stringify(v.bytes?.toString('utf8') ?? null)}`);
    }
    const keyText = k.bytes?.toString('utf8') ?? '';
    if (/\\uD[89AB]/.test(keyText)) seen.nonBmpKey += 1;
    if (/\\u00[01]/.test(keyText)) seen.controlKey += 1;
    if (e.key.value === null) seen.nullKey += 1;
    if (v.bytes === null) seen.tombstone += 1;
    else if (v.bytes.toString('utf8') === 'null') seen.nullValue += 1;
    else if (v.bytes.toString('utf8') === '"null"') seen.jsonNullValue += 1;
  }
  assert.deepEqual(wrong.slice(0, 10), [], `${wrong.length} of ${events.length} events differ from JsonConverter`);
  // The generator reached every case the comparison is about.
  assert.ok(events.length >= 3000, `${events.length} events`);
  for (const [name, count] of Object.entries(seen)) assert.ok(count >= 10, `${name}: ${count} events`);
});

test('integration: a schema migrated to 007 with a table attached gets 008 from migrate once, and the attached trigger writes what JsonConverter writes without a new attach', async () => {
  const schema = uniqueName('dbzjc008');
  const quoted = `"${schema}"`;
  const client = await db.pool.connect();
  try {
    // What `migrate` left in users' databases before 008 existed.
    await client.query(`CREATE SCHEMA ${quoted}`);
    await client.query(`CREATE TABLE ${quoted}.outbox_migrations (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    for (const m of (await loadMigrations(schema)).filter((m) => m.id <= 7)) {
      await client.query(m.sql);
      await client.query(`INSERT INTO ${quoted}.outbox_migrations (id, name) VALUES ($1, $2)`, [m.id, m.name]);
    }
    await client.query(`CREATE TABLE "${app}".before_008 (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb)`);
    // The trigger as 007's attach created it (attach itself now wants migration 008).
    await client.query(`CREATE TRIGGER outbox_relay_debezium AFTER INSERT ON "${app}".before_008 FOR EACH ROW EXECUTE FUNCTION ${quoted}.outbox_debezium_capture(
      'aggregatetype', 't', 'aggregateid', 'id', 'uuid', 'payload', 'jsonb', '', '', 'false', 'json', 'json')`);

    const first = await migrate({ client, schema });
    const after007 = (await loadMigrations(schema)).filter((m) => m.id > 7).map((m) => m.name);
    assert.equal(after007[0], '008_debezium_json_converter.sql');
    assert.deepEqual(first.applied, after007, 'every migration after 007, 008 first');
    assert.equal(first.alreadyApplied.length, 7);
    assert.deepEqual((await migrate({ client, schema })).applied, [], 'applied once');

    await client.query(`INSERT INTO "${app}".before_008 VALUES (gen_random_uuid(), 'x', $1, 'T', NULL)`, ['k\u001f🚀']);
    const { rows } = await client.query<{ key: string; value: Buffer | null }>(`SELECT key, payload_bytes AS value FROM ${quoted}.outbox`);
    const [expectedKey] = jsonConverter([{ kind: 'string', value: 'k\u001f🚀' }], 1);
    assert.deepEqual(rows.map((r) => [r.key, r.value?.toString('utf8')]), [[expectedKey!.bytes!.toString('utf8'), 'null']]);
  } finally {
    await client.query(`DROP SCHEMA IF EXISTS ${quoted} CASCADE`).catch(() => undefined);
    client.release();
  }
});
