import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { attachDebeziumOutbox, debeziumAttachScript, detachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';
import { replayDeadLetters } from '../src/commands/deadLetters.js';
import { ConfigError } from '../src/shared/errors.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, uniqueName, DATABASE_URL, type TestSchema } from './helpers/db.js';
import { readTopic, testBrokers, testKafka, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { partitionOf } from './helpers/partition.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// Writers that know only a Debezium-shaped outbox table (the event router's default
// shape), the trigger of sql/007 copying their rows into our outbox, and a relay with
// its defaults publishing them. Expected values are what the event router sends with
// key.converter and value.converter = StringConverter (ByteArrayConverter for bytea):
// the key and payload as text, jsonb in the text form logical decoding hands Debezium.

let db: TestSchema;
let app: string;
let writer: string;
let writerPool: pg.Pool;

before(async () => {
  db = await createTestSchema('dbz');
  app = `${db.schema}_app`;
  writer = `${db.schema}_writer`;
  await db.pool.query(`CREATE SCHEMA "${app}"`);
  // The writers' role: USAGE on their schema and INSERT/DELETE on their own tables, no
  // grant at all on the outbox schema.
  await db.pool.query(`CREATE ROLE "${writer}" LOGIN`);
  await db.pool.query(`GRANT USAGE ON SCHEMA "${app}" TO "${writer}"`);
  const url = new URL(DATABASE_URL);
  url.username = writer;
  writerPool = new pg.Pool({ connectionString: url.toString(), max: 4 });
});

after(async () => {
  await writerPool?.end();
  await db.pool.query(`DROP SCHEMA IF EXISTS "${app}" CASCADE`).catch(() => undefined);
  await db.pool.query(`DROP OWNED BY "${writer}"`).catch(() => undefined);
  await db.pool.query(`DROP ROLE IF EXISTS "${writer}"`).catch(() => undefined);
  await db.drop();
});

/** A Debezium-shaped table in the app schema, written by the writer role (its only grants). */
async function debeziumTable(name: string, columns = DEFAULT_COLUMNS): Promise<string> {
  await db.pool.query(`CREATE TABLE "${app}"."${name}" (${columns})`);
  // SELECT: a DELETE ... WHERE reads the columns it filters on.
  await db.pool.query(`GRANT SELECT, INSERT, DELETE ON "${app}"."${name}" TO "${writer}"`);
  return `${app}.${name}`;
}

const DEFAULT_COLUMNS = `id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255),
  type varchar(255) NOT NULL, payload jsonb, tenant text`;

async function createTopics(topics: string[], config: Array<{ name: string; value: string }> = []): Promise<void> {
  const admin = testKafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: topics.map((topic) => ({ topic, numPartitions: 3, configEntries: config })), waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
}

async function asWriter<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await writerPool.connect();
  let failed: Error | undefined;
  try {
    return await work(client);
  } catch (error) {
    failed = error as Error;
    throw error;
  } finally {
    client.release(failed);
  }
}

function startRelay(): Relay {
  return createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema });
}

/** jsonb as Postgres renders it: what pgoutput gives Debezium, and what it then sends. */
async function jsonbText(value: unknown): Promise<string> {
  const { rows } = await db.pool.query<{ t: string }>('SELECT $1::jsonb::text AS t', [JSON.stringify(value)]);
  return rows[0]!.t;
}

interface Event {
  id: string;
  type: string;
  aggregatetype: string;
  aggregateid: string;
  seq: number;
  tenant: string;
}

test('integration: writers of a Debezium outbox table (insert-then-delete, rollbacks, several aggregates) are published as the event router would route them, in order per aggregate; a row with an illegal topic is dead-lettered alone', async () => {
  const prefix = uniqueName('dbz').replaceAll('_', '-');
  const table = await debeziumTable('outboxevent');
  const types = ['order', 'customer'];
  await createTopics(types.map((t) => `${prefix}.${t}`));
  const attached = await attachDebeziumOutbox({
    databaseUrl: db.databaseUrl,
    schema: db.schema,
    table,
    topicPattern: `${prefix}.\${routedByValue}`,
    additionalPlacement: 'tenant:header:tenant-id',
  });
  assert.equal(attached.replaced, false);

  const committed: Event[] = [];
  const rolledBack: string[] = [];
  const seq = new Map<string, number>();
  const nextEvent = (aggregatetype: string, aggregateid: string): Event => {
    const k = `${aggregatetype}/${aggregateid}`;
    const n = (seq.get(k) ?? 0) + 1;
    seq.set(k, n);
    return { id: crypto.randomUUID(), type: `${aggregatetype}-changed`, aggregatetype, aggregateid, seq: n, tenant: `tenant-${aggregateid}` };
  };
  const insert = (c: pg.PoolClient, e: Event) =>
    c.query(`INSERT INTO "${app}".outboxevent (id, aggregatetype, aggregateid, type, payload, tenant) VALUES ($1, $2, $3, $4, $5, $6)`, [
      e.id, e.aggregatetype, e.aggregateid, e.type, JSON.stringify({ seq: e.seq, aggregate: e.aggregateid, nested: { b: [1, 2], a: 'x' } }), e.tenant,
    ]);
  let badId = '';
  await asWriter(async (c) => {
    for (let round = 0; round < 12; round += 1) {
      const batch = [nextEvent('order', `o${round % 4}`), nextEvent('customer', `c${round % 3}`), nextEvent('order', `o${(round + 1) % 4}`)];
      await c.query('BEGIN');
      for (const e of batch) await insert(c, e);
      if (round % 5 === 4) {
        // Rolled back: these events never happened. Their sequence numbers are reused.
        await c.query('ROLLBACK');
        for (const e of batch) {
          rolledBack.push(e.id);
          seq.set(`${e.aggregatetype}/${e.aggregateid}`, e.seq - 1);
        }
        continue;
      }
      // Every other round deletes its rows in the same transaction, as Debezium users do.
      if (round % 2 === 0) await c.query(`DELETE FROM "${app}".outboxevent WHERE id = ANY($1::uuid[])`, [batch.map((e) => e.id)]);
      await c.query('COMMIT');
      committed.push(...batch);
      if (round === 6) {
        // An aggregate type no topic name can carry: the relay dead-letters that row only.
        const bad = nextEvent('no such type', 'o1');
        badId = bad.id;
        await c.query('BEGIN');
        await insert(c, bad);
        await c.query('COMMIT');
      }
    }
    // A NULL payload: a tombstone, as the event router sends one.
    const tomb = nextEvent('customer', 'c0');
    await c.query(`INSERT INTO "${app}".outboxevent (id, aggregatetype, aggregateid, type, payload, tenant) VALUES ($1, $2, $3, $4, NULL, $5)`, [
      tomb.id, tomb.aggregatetype, tomb.aggregateid, tomb.type, tomb.tenant,
    ]);
    committed.push({ ...tomb, seq: -1 });
    // The JSON literal null: the text null, as logical decoding and StringConverter give it.
    const jsonNull = nextEvent('customer', 'c1');
    await c.query(`INSERT INTO "${app}".outboxevent (id, aggregatetype, aggregateid, type, payload, tenant) VALUES ($1, $2, $3, $4, 'null', $5)`, [
      jsonNull.id, jsonNull.aggregatetype, jsonNull.aggregateid, jsonNull.type, jsonNull.tenant,
    ]);
    committed.push({ ...jsonNull, seq: -2 });
    // The writer has no grant on the outbox: only the trigger writes there.
    await assert.rejects(c.query(`INSERT INTO "${db.schema}".outbox (topic, key) VALUES ('t', 'k')`), /permission denied/);
  });
  assert.equal((await db.pool.query(`SELECT count(*)::int AS n FROM "${app}".outboxevent`)).rows[0].n > 0, true, 'some rows stay in the Debezium table');

  const relay = startRelay();
  await relay.start();
  try {
    const byTopic = new Map<string, ReadMessage[]>();
    for (const type of types) {
      const expected = committed.filter((e) => e.aggregatetype === type).length;
      byTopic.set(type, await readTopic(`${prefix}.${type}`, (m) => m.length >= expected));
    }
    const dead = await waitFor('the dead letter', async () => {
      const { rows } = await db.pool.query(`SELECT message_id, topic, key, error_name, reason FROM "${db.schema}".outbox_dead_letters`);
      return rows.length > 0 ? rows : undefined;
    });
    assert.deepEqual(
      dead.map((d) => [d.message_id, d.topic, d.key, d.error_name]),
      [[badId, `${prefix}.no such type`, 'o1', 'validation:invalid_topic']],
    );

    const ids = new Set<string>();
    for (const [type, messages] of byTopic) {
      const events = committed.filter((e) => e.aggregatetype === type);
      assert.equal(messages.length, events.length, `${type}: every committed event once, nothing else`);
      const lastSeq = new Map<string, number>();
      for (const m of messages) {
        const e = events.find((x) => x.id === m.headers.id);
        assert.ok(e, `${type}: message ${m.headers.id} is a committed event`);
        ids.add(e.id);
        assert.equal(m.key, e.aggregateid);
        assert.equal(m.headers[HEADERS.messageId], e.id, 'message-id is the Debezium id');
        assert.equal(m.headers.type, e.type);
        assert.equal(m.headers['tenant-id'], e.tenant);
        if (e.seq === -1) {
          assert.equal(m.value, null, 'a NULL payload is a tombstone');
          continue;
        }
        if (e.seq === -2) {
          assert.equal(m.value?.toString('utf8'), 'null', 'a JSON null payload is the text null, not a tombstone');
          continue;
        }
        const expected = await jsonbText({ seq: e.seq, aggregate: e.aggregateid, nested: { b: [1, 2], a: 'x' } });
        assert.equal(m.value?.toString('utf8'), expected, 'the value is the jsonb text, byte for byte');
        assert.ok(e.seq > (lastSeq.get(`${m.partition}/${e.aggregateid}`) ?? 0), `${e.aggregateid}: seq ${e.seq} after ${lastSeq.get(`${m.partition}/${e.aggregateid}`)}`);
        lastSeq.set(`${m.partition}/${e.aggregateid}`, e.seq);
      }
      // One aggregate, one partition.
      for (const id of new Set(messages.map((m) => m.key))) assert.equal(new Set(messages.filter((m) => m.key === id).map((m) => m.partition)).size, 1);
    }
    for (const id of rolledBack) assert.equal(ids.has(id), false, `rolled-back event ${id} is never published`);
    assert.equal(ids.size, committed.length);
  } finally {
    await relay.stop();
  }
});

test('integration: text, json and bytea payloads, a non-uuid id, a timestamp column and tombstone-on-empty map as the event router maps them', async () => {
  const topic = uniqueName('dbzkinds').replaceAll('_', '-');
  await createTopics([topic]);
  const text = await debeziumTable('text_events', 'id bigint, aggregatetype text, aggregateid text, type text, payload text, created timestamp');
  const json = await debeziumTable('json_events', 'id uuid, aggregatetype text, aggregateid text, type text, payload json');
  // src: a constant column placed as Debezium's connectorLogicalName context header (docs/debezium.md).
  const bytes = await debeziumTable('bytea_events', "id uuid, aggregatetype text, aggregateid text, kind text, body bytea, src text DEFAULT 'dbserver1'");
  const common = { databaseUrl: db.databaseUrl, schema: db.schema, topicPattern: topic };
  await attachDebeziumOutbox({ ...common, table: text, timestampColumn: 'created', tombstoneOnEmptyPayload: true });
  await attachDebeziumOutbox({ ...common, table: json });
  await attachDebeziumOutbox({ ...common, table: bytes, payloadColumn: 'body', typeColumn: null, additionalPlacement: 'kind:header:eventType,src:header:__debezium.context.connectorLogicalName' });
  const jsonText = ' {"b":1,   "a" : [2,1], "b":3}\n';
  const binary = Buffer.from([0, 1, 2, 255, 254, 10]);
  await asWriter(async (c) => {
    await c.query(`INSERT INTO "${app}".text_events VALUES (41, 'x', 't1', 'T', 'plain text ✓', '2024-05-06 07:08:09.123'), (42, 'x', 't1', 'T', '  ', NULL), (43, 'x', 't1', 'T', NULL, NULL)`);
    await c.query(`INSERT INTO "${app}".json_events VALUES (gen_random_uuid(), 'x', 'j1', 'J', $1), (gen_random_uuid(), 'x', 'j1', 'J', 'null'), (gen_random_uuid(), 'x', 'j1', 'J', NULL)`, [jsonText]);
    await c.query(`INSERT INTO "${app}".text_events VALUES (44, 'x', 't2', 'T', 'null', NULL)`);
    await c.query(`INSERT INTO "${app}".bytea_events VALUES (gen_random_uuid(), 'x', 'b1', 'blob', $1), (gen_random_uuid(), 'x', 'b1', 'blob', ''::bytea)`, [binary]);
  });
  const relay = startRelay();
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 9);
    assert.equal(messages.length, 9);
    const of = (key: string) => messages.filter((m) => m.key === key).sort((a, b) => Number(a.headers[HEADERS.outboxId]) - Number(b.headers[HEADERS.outboxId]));

    const [t1, t2, t3] = of('t1');
    assert.equal(t1!.value?.toString('utf8'), 'plain text ✓');
    assert.equal(t1!.headers.id, '41');
    assert.equal(t1!.headers.type, 'T');
    assert.equal(t1!.headers[HEADERS.contentType], undefined, 'text is not announced as JSON');
    assert.equal(t1!.timestamp, String(Date.UTC(2024, 4, 6, 7, 8, 9, 123)), 'a timestamp column without zone is read as UTC');
    assert.equal(t2!.value, null, 'a blank text is a tombstone with tombstoneOnEmptyPayload');
    assert.equal(t3!.value, null);
    // A bigint id: a stable uuid derived from the table and the id.
    const { rows } = await db.pool.query(`SELECT md5($1)::uuid::text AS u`, [`${app}.text_events:41`]);
    assert.equal(t1!.headers[HEADERS.messageId], rows[0].u);

    const [j1, jNull, jSqlNull] = of('j1');
    assert.equal(j1!.value?.toString('utf8'), jsonText, 'json keeps its text as written');
    assert.equal(j1!.headers[HEADERS.contentType], 'application/json');
    assert.equal(jNull!.value?.toString('utf8'), 'null', 'the JSON literal null is the text null, as StringConverter writes it');
    assert.equal(jNull!.headers[HEADERS.contentType], 'application/json');
    assert.equal(jSqlNull!.value, null, 'SQL NULL is a tombstone');
    const [t4] = of('t2');
    assert.equal(t4!.value?.toString('utf8'), 'null', 'a text null is not blank');

    const [b1, b2] = of('b1');
    assert.deepEqual(b1!.value, binary);
    assert.equal(b1!.headers.eventType, 'blob');
    assert.equal(b1!.headers['__debezium.context.connectorLogicalName'], 'dbserver1');
    assert.equal(b1!.headers.type, undefined, 'typeColumn null: no type header');
    assert.equal(b2!.value?.length, 0, 'an empty bytea is an empty value, not a tombstone (the event router never sees bytes as empty)');
  } finally {
    await relay.stop();
  }
});

test('integration: with the JSON converters, keys and values are the JSON the connector wrote (a quoted key, so the same partition; the payload as a JSON string; bytes as base64; NULL as null)', async () => {
  const topic = uniqueName('dbzjson').replaceAll('_', '-');
  await createTopics([topic]);
  const jsonb = await debeziumTable('jsonconv_events');
  const bytes = await debeziumTable('jsonconv_bytes', 'id uuid, aggregatetype text, aggregateid bigint, type text, payload bytea');
  const common = { databaseUrl: db.databaseUrl, schema: db.schema, topicPattern: topic, keyConverter: 'json', valueConverter: 'json' } as const;
  await attachDebeziumOutbox({ ...common, table: jsonb });
  await attachDebeziumOutbox({ ...common, table: bytes });
  const binary = Buffer.alloc(100, 7); // long enough for Postgres' base64 to break lines
  await asWriter(async (c) => {
    await c.query(`INSERT INTO "${app}".jsonconv_events (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'x', 'order-"7"', 'T', '{"b": [1, 2], "a": "é"}'), (gen_random_uuid(), 'x', 'order-"7"', 'T', NULL)`);
    await c.query(`INSERT INTO "${app}".jsonconv_bytes VALUES (gen_random_uuid(), 'x', 42, 'B', $1)`, [binary]);
  });
  const relay = startRelay();
  await relay.start();
  try {
    const messages = await readTopic(topic, (m) => m.length >= 3);
    const jsonKey = JSON.stringify('order-"7"');
    const [first, tombstone] = messages.filter((m) => m.key === jsonKey).sort((a, b) => Number(a.headers[HEADERS.outboxId]) - Number(b.headers[HEADERS.outboxId]));
    assert.ok(first && tombstone, `the key is the JSON string (got ${messages.map((m) => m.key).join(', ')})`);
    assert.equal(first.value?.toString('utf8'), JSON.stringify('{"a": "é", "b": [1, 2]}'), 'the jsonb text, as a JSON string');
    assert.equal(first.partition, partitionOf(jsonKey, 3), "the JSON key's partition, as Kafka Connect's producer picks it");
    assert.equal(tombstone.value?.toString('utf8'), 'null', 'a NULL payload keeps its schema in the router, so JsonConverter writes null: not a tombstone');
    const b = messages.find((m) => m.key === '42');
    assert.ok(b, 'a number key is the number');
    assert.equal(b.value?.toString('utf8'), JSON.stringify(binary.toString('base64')));
  } finally {
    await relay.stop();
  }
});

test('integration: a dead letter of a Debezium event (Kafka refuses it) parks its aggregate; replayed, it and the waiting events go out in order with the same id', async () => {
  const topic = uniqueName('dbzsmall').replaceAll('_', '-');
  await createTopics([topic], [{ name: 'max.message.bytes', value: '2000' }]);
  const table = await debeziumTable('replay_events');
  await attachDebeziumOutbox({ databaseUrl: db.databaseUrl, schema: db.schema, table, topicPattern: topic });
  const ids = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
  const payloads = [{ n: 1 }, { n: 2, pad: 'x'.repeat(5_000) }, { n: 3 }, { n: 1, other: true }];
  await asWriter(async (c) => {
    for (const [i, id] of ids.entries()) {
      await c.query(`INSERT INTO "${app}".replay_events (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'a', $2, 'A', $3)`, [
        id, i === 3 ? 'other' : 'agg', JSON.stringify(payloads[i]),
      ]);
    }
  });
  const relay = startRelay();
  await relay.start();
  try {
    const first = await readTopic(topic, (m) => m.length >= 2);
    assert.deepEqual(first.map((m) => m.headers.id).sort(), [ids[0], ids[3]].sort());
    const dead = await waitFor('the dead letter', async () => {
      const { rows } = await db.pool.query(`SELECT id, message_id, error_name FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [topic]);
      return rows[0];
    });
    assert.equal(dead.message_id, ids[1]);
    assert.equal(dead.error_name, 'MESSAGE_TOO_LARGE');

    // The operator fixes the cause, then replays.
    const admin = testKafka().admin();
    await admin.connect();
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: 2, name: topic, configEntries: [{ name: 'max.message.bytes', value: '100000' }] }] });
    await admin.disconnect();
    const replay = await replayDeadLetters({ databaseUrl: db.databaseUrl, schema: db.schema, ids: [Number(dead.id)] });
    assert.equal(replay.replayed, 1);

    const all = await readTopic(topic, (m) => m.length >= 4);
    const agg = all.filter((m) => m.key === 'agg').map((m) => m.headers.id);
    assert.deepEqual(agg, [ids[0], ids[1], ids[2]], 'the aggregate keeps its order through the replay');
    const replayed = all.find((m) => m.headers.id === ids[1])!;
    assert.equal(replayed.headers[HEADERS.messageId], ids[1]);
    assert.equal(replayed.headers.type, 'A');
    assert.equal(replayed.value?.toString('utf8'), await jsonbText(payloads[1]));
  } finally {
    await relay.stop();
  }
});

test('integration: attach checks the table, its columns and the options first; re-attaching replaces the settings; detach stops the capture; nobody else can attach the function', async () => {
  const table = await debeziumTable('checked_events');
  const base = { databaseUrl: db.databaseUrl, schema: db.schema, table };
  const refused = async (options: Partial<Parameters<typeof attachDebeziumOutbox>[0]>, setting: string, message: RegExp) => {
    await assert.rejects(attachDebeziumOutbox({ ...base, ...options }), (e: unknown) => {
      assert.ok(e instanceof ConfigError, String(e));
      assert.equal(e.setting, setting);
      assert.match(e.message, message);
      return true;
    });
  };
  await refused({ table: `${app}.no_such_table` }, 'table', /table "[^"]+"\."no_such_table" does not exist/);
  await refused({ payloadColumn: 'body' }, 'payloadColumn', /column "body" does not exist in .*checked_events.*\(its columns: id, aggregatetype, aggregateid, type, payload, tenant\)/);
  await refused({ keyColumn: 'aggregate_id' }, 'keyColumn', /column "aggregate_id" does not exist/);
  await refused({ typeColumn: 'event_type' }, 'typeColumn', /column "event_type" does not exist/);
  await refused({ additionalPlacement: 'tenant:header:t,region:header' }, 'additionalPlacement', /column "region" does not exist/);
  await refused({ payloadColumn: 'tenant', timestampColumn: 'type' }, 'timestampColumn', /is character varying; supported: timestamp/);
  await refused({ topicPattern: 'events/${routedByValue}' }, 'topicPattern', /not give a legal Kafka topic name/);
  await refused({ topicPattern: '${aggregate}' }, 'topicPattern', /no \$\{routedByValue\}/);
  await refused({ additionalPlacement: 'tenant:envelope:tenant' }, 'additionalPlacement', /placement envelope is not supported, only header/);
  await refused({ additionalPlacement: 'tenant:partition' }, 'additionalPlacement', /placement partition is not supported/);
  await refused({ additionalPlacement: 'tenant:header:message-id' }, 'additionalPlacement', /set by outbox-relay itself/);
  await refused({ table: `${db.schema}.outbox` }, 'table', /one of outbox-relay's own tables/);
  await refused({ table: `${db.schema}.effect_keys` }, 'table', /one of outbox-relay's own tables/);
  // A typo would otherwise attach with the router's default for that option.
  await refused({ topicPatern: 'x' } as never, 'topicPatern', /is not an option of the Debezium attach \(table, routeByColumn, topicPattern/);
  await assert.rejects(detachDebeziumOutbox({ ...base, tabel: 'x' } as never), /tabel: is not an option/);
  await assert.rejects(debeziumAttachScript({ ...base, keyConvertor: 'json' } as never), /keyConvertor: is not an option/);
  await db.pool.query(`CREATE TABLE "${app}".wrong_payload (id uuid, aggregatetype text, aggregateid text, type text, payload numeric)`);
  await refused({ table: `${app}.wrong_payload` }, 'payloadColumn', /is numeric; supported: jsonb, json, text, character varying, bytea/);
  // Domains count as their base type (docs: "or domains over them").
  await db.pool.query(`CREATE DOMAIN "${app}".event_doc AS jsonb; CREATE DOMAIN "${app}".aggregate_ref AS varchar(64)`);
  await db.pool.query(`CREATE TABLE "${app}".domain_events (id uuid, aggregatetype text, aggregateid "${app}".aggregate_ref, type text, payload "${app}".event_doc)`);
  assert.deepEqual((await attachDebeziumOutbox({ ...base, table: `${app}.domain_events` })).arguments.slice(4, 7), ['uuid', 'payload', 'jsonb']);
  await db.pool.query(`CREATE DOMAIN "${app}".amount AS numeric`);
  await db.pool.query(`CREATE TABLE "${app}".domain_key (id uuid, aggregatetype text, aggregateid "${app}".amount, type text, payload jsonb)`);
  await refused({ table: `${app}.domain_key` }, 'keyColumn', /is numeric; supported: text/);
  // Keys Debezium would have written otherwise (a Decimal, epoch numbers, a JSON string):
  // the partitions would change at the switch.
  await db.pool.query(`CREATE TABLE "${app}".wrong_key (id uuid, aggregatetype text, aggregateid numeric, created timestamptz, doc jsonb, type text, payload jsonb)`);
  for (const keyColumn of ['aggregateid', 'created', 'doc']) {
    await refused({ table: `${app}.wrong_key`, keyColumn }, 'keyColumn', /is (numeric|timestamp with time zone|jsonb); supported: text, character varying, uuid, smallint, integer, bigint, boolean/);
  }

  const topics = async () => {
    const { rows } = await db.pool.query(`SELECT topic FROM "${db.schema}".outbox WHERE key = 'k-checked' ORDER BY id`);
    return rows.map((r) => r.topic as string);
  };
  const write = () =>
    asWriter((c) => c.query(`INSERT INTO "${app}".checked_events VALUES (gen_random_uuid(), 'thing', 'k-checked', 'T', '{}', 'x')`));
  assert.equal((await attachDebeziumOutbox({ ...base, topicPattern: 'first.${routedByValue}' })).replaced, false);
  await write();
  const second = await attachDebeziumOutbox({ ...base, topicPattern: 'second.${routedByValue}' });
  assert.equal(second.replaced, true);
  await write();
  const { rows: triggers } = await db.pool.query(`SELECT count(*)::int AS n FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal`, [`"${app}"."checked_events"`]);
  assert.equal(triggers[0].n, 1, 'one trigger, its settings replaced');
  assert.deepEqual((await detachDebeziumOutbox(base)).detached, true);
  assert.deepEqual((await detachDebeziumOutbox(base)).detached, false);
  await write();
  assert.deepEqual(await topics(), ['first.thing', 'second.thing']);

  // The function runs as the outbox's owner: nobody but that owner may attach it.
  await db.pool.query(`CREATE TABLE "${app}".writers_own (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb)`);
  await db.pool.query(`ALTER TABLE "${app}".writers_own OWNER TO "${writer}"`);
  await asWriter(async (c) => {
    await assert.rejects(
      c.query(`CREATE TRIGGER t AFTER INSERT ON "${app}".writers_own FOR EACH ROW EXECUTE FUNCTION "${db.schema}".outbox_debezium_capture('aggregatetype', 'x', 'aggregateid', 'id', 'payload', '', 'false')`),
      /permission denied/,
    );
  });

  // The script for a DBA does what attach does; printing it changes nothing.
  const script = await debeziumAttachScript({ databaseUrl: db.databaseUrl, schema: db.schema, table, topicPattern: 'third.${routedByValue}', additionalPlacement: 'tenant:header:tenant-id' });
  assert.match(script, /CREATE TRIGGER outbox_relay_debezium AFTER INSERT ON "[^"]+"\."checked_events"/);
  await write();
  assert.deepEqual(await topics(), ['first.thing', 'second.thing']);
  await db.pool.query(script);
  await write();
  assert.deepEqual(await topics(), ['first.thing', 'second.thing', 'third.thing']);
  await assert.rejects(debeziumAttachScript({ ...base, payloadColumn: 'body' }), /payloadColumn: column "body" does not exist/);
});
