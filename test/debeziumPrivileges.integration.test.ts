import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { attachDebeziumOutbox, detachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';
import { OutboxError } from '../src/shared/errors.js';
import { createTestSchema, DATABASE_URL, type TestSchema } from './helpers/db.js';

// docs/debezium.md#privileges: what attach and detach need, and that a role without it
// is told which privilege on what, not only Postgres' "permission denied".

let db: TestSchema;
let app: string;
let attacher: string;

before(async () => {
  db = await createTestSchema('dbzpriv');
  app = `${db.schema}_app`;
  attacher = `${db.schema}_attacher`;
  await db.pool.query(`CREATE SCHEMA "${app}"`);
  await db.pool.query(`CREATE TABLE "${app}".events (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb)`);
  await db.pool.query(`CREATE ROLE "${attacher}" LOGIN`);
});

after(async () => {
  await db.pool.query(`DROP SCHEMA IF EXISTS "${app}" CASCADE`).catch(() => undefined);
  await db.pool.query(`DROP OWNED BY "${attacher}"`).catch(() => undefined);
  await db.pool.query(`DROP ROLE IF EXISTS "${attacher}"`).catch(() => undefined);
  await db.drop();
});

test('integration: attach and detach by a role short of a privilege name the privilege and the table; TRIGGER and EXECUTE attach once, replacing and detaching take the table owner', async () => {
  const table = `${app}.events`;
  // What openDatabase reads to check the outbox is migrated; nothing on the Debezium table yet.
  await db.pool.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO "${attacher}"`);
  await db.pool.query(`GRANT SELECT ON ALL TABLES IN SCHEMA "${db.schema}" TO "${attacher}"`);
  await db.pool.query(`GRANT TRIGGER ON "${app}".events TO "${attacher}"`);
  const url = new URL(DATABASE_URL);
  url.username = attacher;
  const asAttacher = { databaseUrl: url.toString(), schema: db.schema, table };
  const denied = (pattern: RegExp) => (e: unknown) => {
    assert.ok(e instanceof OutboxError && !e.retriable, String(e));
    assert.match(e.message, pattern);
    return true;
  };

  await assert.rejects(attachDebeziumOutbox(asAttacher), denied(/permission denied for schema \S+_app; attach needs USAGE on schema \S+_app/));
  await db.pool.query(`GRANT USAGE ON SCHEMA "${app}" TO "${attacher}"`);
  await assert.rejects(
    attachDebeziumOutbox(asAttacher),
    denied(/permission denied for function \S*outbox_debezium_capture; attach needs the TRIGGER privilege on .*"events" and EXECUTE on outbox_debezium_capture/),
  );
  await db.pool.query(`GRANT EXECUTE ON FUNCTION "${db.schema}".outbox_debezium_capture() TO "${attacher}"`);
  assert.equal((await attachDebeziumOutbox(asAttacher)).replaced, false, 'TRIGGER and EXECUTE are enough for a first attach');
  await assert.rejects(attachDebeziumOutbox(asAttacher), denied(/must be owner of (table|relation) events; replacing or dropping a trigger is for the owner of .*"events"/));
  await assert.rejects(detachDebeziumOutbox(asAttacher), denied(/^debezium detach: must be owner .*; replacing or dropping a trigger is for the owner/));

  // As the table's owner, holding EXECUTE, both work.
  const { rows } = await db.pool.query<{ owner: string }>(`SELECT tableowner AS owner FROM pg_tables WHERE schemaname = $1 AND tablename = 'events'`, [app]);
  await db.pool.query(`ALTER TABLE "${app}".events OWNER TO "${attacher}"`);
  assert.equal((await attachDebeziumOutbox(asAttacher)).replaced, true, `as the table's owner (was ${rows[0]!.owner}), attach replaces`);
  assert.equal((await detachDebeziumOutbox(asAttacher)).detached, true);
});
