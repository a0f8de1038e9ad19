import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { attachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';
import { createTestSchema, DATABASE_URL, type TestSchema } from './helpers/db.js';

// A column the Debezium attach mapped (sql/011_debezium_mapped_columns.sql), dropped or
// renamed after the attach: the writer's insert fails naming the column and the table,
// instead of an event captured with key '' (dead-lettered later), a random message id,
// the topic pattern unreplaced or a header missing, in silence. Postgres only: the
// capture is the trigger's, no relay or Kafka is involved.

let db: TestSchema;
let app: string;
let writer: string;
let writerPool: pg.Pool;

before(async () => {
  db = await createTestSchema('dbzcol');
  app = `${db.schema}_app`;
  writer = `${db.schema}_writer`;
  await db.pool.query(`CREATE SCHEMA "${app}"`);
  await db.pool.query(`CREATE ROLE "${writer}" LOGIN`);
  await db.pool.query(`GRANT USAGE ON SCHEMA "${app}" TO "${writer}"`);
  const url = new URL(DATABASE_URL);
  url.username = writer;
  writerPool = new pg.Pool({ connectionString: url.toString(), max: 2 });
});

after(async () => {
  await writerPool?.end();
  await db.pool.query(`DROP SCHEMA IF EXISTS "${app}" CASCADE`).catch(() => undefined);
  await db.pool.query(`DROP OWNED BY "${writer}"`).catch(() => undefined);
  await db.pool.query(`DROP ROLE IF EXISTS "${writer}"`).catch(() => undefined);
  await db.drop();
});

/** Every column the attach below maps, plus `note`, which it does not. */
const COLUMNS = ['id', 'aggregatetype', 'aggregateid', 'type', 'payload', 'created', 'tenant', 'note'] as const;
const VALUES: Record<(typeof COLUMNS)[number], string> = {
  id: 'gen_random_uuid()',
  aggregatetype: `'thing'`,
  aggregateid: `'k1'`,
  type: `'Created'`,
  payload: `'{"a": 1}'`,
  created: `'2024-05-06 07:08:09'`,
  tenant: `'t1'`,
  note: `'n'`,
};

/** A Debezium-shaped table, attached with a timestamp column and a placed header; its events go to topics `<topicPrefix>.<aggregatetype>`. */
async function attachedTable(name: string, topicPrefix: string): Promise<string> {
  await db.pool.query(
    `CREATE TABLE "${app}"."${name}" (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb, created timestamp, tenant text, note text)`,
  );
  await db.pool.query(`GRANT INSERT ON "${app}"."${name}" TO "${writer}"`);
  await attachDebeziumOutbox({
    databaseUrl: db.databaseUrl,
    schema: db.schema,
    table: `${app}.${name}`,
    topicPattern: `${topicPrefix}.\${routedByValue}`,
    timestampColumn: 'created',
    additionalPlacement: 'tenant:header:tenant-id',
  });
  return name;
}

/** The writer inserts a row of every column the table still has. */
function write(table: string, columns: readonly string[]): Promise<pg.QueryResult> {
  const values = columns.map((c) => VALUES[c as (typeof COLUMNS)[number]]);
  return writerPool.query(`INSERT INTO "${app}"."${table}" (${columns.join(', ')}) VALUES (${values.join(', ')})`);
}

async function captured(topicPrefix: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic LIKE $1`, [`${topicPrefix}.%`]);
  return rows[0]!.n;
}

function refusedFor(column: string, table: string) {
  return (e: unknown): boolean => {
    const error = e as pg.DatabaseError;
    assert.equal(error.code, '42703', String(e));
    assert.match(error.message, new RegExp(`column ${column} of ${app}\\.${table} is mapped by its outbox-relay Debezium attach \\(trigger outbox_relay_debezium\\) but the table no longer has it`));
    assert.match(error.hint ?? '', /outbox-relay debezium attach/);
    return true;
  };
}

test('integration: a mapped column dropped after the attach (each of route-by, key, id, payload, timestamp, type header, placed header) fails the writer\'s insert naming it; nothing is captured', async () => {
  const mapped = COLUMNS.filter((c) => c !== 'note');
  for (const column of mapped) {
    const table = await attachedTable(`drop_${column}`, `dropped.${column}`);
    await write(table, COLUMNS);
    assert.equal(await captured(`dropped.${column}`), 1, `${column}: an insert before the drop is captured`);
    await db.pool.query(`ALTER TABLE "${app}"."${table}" DROP COLUMN ${column}`);
    await assert.rejects(write(table, COLUMNS.filter((c) => c !== column)), refusedFor(column, table), `${column}: the insert after the drop`);
    assert.equal(await captured(`dropped.${column}`), 1, `${column}: nothing captured after the drop`);
  }
});

test('integration: a mapped column renamed after the attach fails the insert too; an unmapped column dropped does not, and a new attach on the renamed column captures again', async () => {
  const table = await attachedTable('renamed', 'renamed');
  await db.pool.query(`ALTER TABLE "${app}".renamed RENAME COLUMN aggregateid TO aggregate_id`);
  await assert.rejects(writerPool.query(`INSERT INTO "${app}".renamed (id, aggregatetype, aggregate_id, type, payload) VALUES (gen_random_uuid(), 'thing', 'k1', 'T', '{}')`), refusedFor('aggregateid', table));
  assert.equal(await captured('renamed'), 0);

  await attachDebeziumOutbox({ databaseUrl: db.databaseUrl, schema: db.schema, table: `${app}.renamed`, topicPattern: 'renamed.${routedByValue}', keyColumn: 'aggregate_id' });
  await db.pool.query(`ALTER TABLE "${app}".renamed DROP COLUMN note`);
  await writerPool.query(`INSERT INTO "${app}".renamed (id, aggregatetype, aggregate_id, type, payload) VALUES (gen_random_uuid(), 'thing', 'k1', 'T', '{}')`);
  const { rows } = await db.pool.query(`SELECT topic, key FROM "${db.schema}".outbox WHERE topic = 'renamed.thing'`);
  assert.deepEqual(rows, [{ topic: 'renamed.thing', key: 'k1' }]);
});
