/**
 * What the Debezium-format trigger (sql/007_debezium_outbox.sql) costs the writers:
 * pgbench inserting into two identical Debezium-shaped tables, one plain and one
 * attached to an outbox, taking turns in one run so that both see the same load.
 * Two workloads: one insert per transaction, and insert-then-delete (the pattern
 * Debezium recommends). Then the cost per row inside the server, without commits: one
 * statement inserting 20,000 rows (rolled back), the tables taking turns, with a third
 * table whose trigger is written by hand for it (static SQL, the same row): what the
 * generic function adds over the extra row itself. No relay
 * runs: this is the write-side cost alone (the rows the trigger adds are published like
 * any outbox row).
 *
 *   npx tsx scripts/debeziumTriggerCost.ts [seconds per run = 10] [rounds = 3] [clients = 4]
 *
 * DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test). Creates and drops a
 * schema of its own.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrate } from '../src/commands/migrate.js';
import { attachDebeziumOutbox } from '../src/commands/debeziumOutbox.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 3);
const clients = Number(process.argv[4] ?? 4);
const schema = `dbz_cost_${Date.now().toString(36)}`;

const TABLE = `(id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL, payload jsonb, tenant text)`;
// The payload of the event router's documentation example, about 250 bytes.
const PAYLOAD = `'{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}'`;

const dir = mkdtempSync(join(tmpdir(), 'dbz-cost-'));
function script(name: string, table: string, deleteToo: boolean): string {
  const file = join(dir, `${name}.sql`);
  const insert = `INSERT INTO ${schema}.${table} (id, aggregatetype, aggregateid, type, payload, tenant) VALUES (':uuid', 'order', :agg, 'OrderCreated', ${PAYLOAD}, 'acme');`;
  const body = deleteToo
    ? `\\set agg random(1, 10000)\nBEGIN;\nSELECT gen_random_uuid() AS uuid \\gset\n${insert}\nDELETE FROM ${schema}.${table} WHERE id = ':uuid';\nCOMMIT;\n`
    : `\\set agg random(1, 10000)\nSELECT gen_random_uuid() AS uuid \\gset\n${insert}\n`;
  writeFileSync(file, body);
  return file;
}

function pgbench(file: string): number {
  const out = execFileSync('pgbench', ['-n', '-c', String(clients), '-j', String(Math.min(clients, 2)), '-T', String(seconds), '-f', file, url], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const m = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
  if (!m) throw new Error(`no tps in pgbench output:\n${out}`);
  return Number(m[1]);
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

await migrate({ databaseUrl: url, schema });
const db = new pg.Client({ connectionString: url });
await db.connect();
try {
  await db.query(`CREATE TABLE ${schema}.plain_events ${TABLE}`);
  await db.query(`CREATE TABLE ${schema}.captured_events ${TABLE}`);
  await attachDebeziumOutbox({ client: db, schema, table: `${schema}.captured_events`, additionalPlacement: 'tenant:header:tenant-id' });
  await db.query(`CREATE TABLE ${schema}.handwritten_events ${TABLE}`);
  await db.query(`CREATE FUNCTION ${schema}.handwritten_capture() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO ${schema}.outbox (message_id, topic, key, payload, headers)
      VALUES (NEW.id, 'outbox.event.' || NEW.aggregatetype, NEW.aggregateid, NEW.payload,
              jsonb_build_object('id', NEW.id::text, 'type', NEW.type, 'tenant-id', NEW.tenant));
      RETURN NULL;
    END $$`);
  await db.query(`CREATE TRIGGER handwritten AFTER INSERT ON ${schema}.handwritten_events FOR EACH ROW EXECUTE FUNCTION ${schema}.handwritten_capture()`);
  const results: Record<string, number[]> = {};
  const workloads = [
    ['insert', false],
    ['insert+delete', true],
  ] as const;
  for (let round = 0; round < rounds; round += 1) {
    for (const [name, deleteToo] of workloads) {
      // Alternate which table goes first, so neither always runs on a warmer cache.
      const order = round % 2 === 0 ? ['plain', 'captured'] : ['captured', 'plain'];
      for (const table of order) {
        const tps = pgbench(script(`${table}-${name}`, `${table}_events`, deleteToo));
        (results[`${name} ${table}`] ??= []).push(tps);
        await db.query(`VACUUM ${schema}.${table}_events`);
        process.stderr.write(`round ${round + 1} ${name} ${table}: ${tps.toFixed(0)} tps\n`);
      }
    }
  }
  const load = execFileSync('cat', ['/proc/loadavg'], { encoding: 'utf8' }).trim();
  process.stdout.write(`pgbench, ${clients} clients, ${rounds} rounds of ${seconds} s each, load average ${load}\n`);
  for (const [name] of workloads) {
    const plain = results[`${name} plain`]!;
    const captured = results[`${name} captured`]!;
    process.stdout.write(
      `${name}: plain ${plain.map((x) => x.toFixed(0)).join(', ')} tps (median ${median(plain).toFixed(0)}); ` +
        `with trigger ${captured.map((x) => x.toFixed(0)).join(', ')} tps (median ${median(captured).toFixed(0)}); ` +
        `ratio ${(median(captured) / median(plain)).toFixed(2)} ×\n`,
    );
  }
  const perRow: Record<string, number[]> = { plain: [], captured: [], handwritten: [] };
  const tables = ['plain', 'captured', 'handwritten'];
  for (let round = 0; round < 5; round += 1) {
    for (const table of round % 2 === 0 ? tables : [...tables].reverse()) {
      await db.query('BEGIN');
      const started = process.hrtime.bigint();
      await db.query(
        `INSERT INTO ${schema}.${table}_events (id, aggregatetype, aggregateid, type, payload, tenant)
         SELECT gen_random_uuid(), 'order', (g % 10000)::text, 'OrderCreated', ${PAYLOAD}, 'acme' FROM generate_series(1, 20000) AS g`,
      );
      perRow[table]!.push(Number(process.hrtime.bigint() - started) / 1e3 / 20_000);
      await db.query('ROLLBACK');
    }
  }
  process.stdout.write(
    `per row in one 20,000-row statement: plain ${median(perRow.plain!).toFixed(1)} µs, with the trigger ${median(perRow.captured!).toFixed(1)} µs, ` +
      `with a hand-written trigger for this table ${median(perRow.handwritten!).toFixed(1)} µs (medians of 5)\n`,
  );
  const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${schema}.outbox`);
  process.stdout.write(`outbox rows written by the trigger: ${rows[0].n}\n`);
} finally {
  await db.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => undefined);
  await db.end();
}
