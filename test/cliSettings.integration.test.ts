import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { DATABASE_URL, uniqueName } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { testBrokers } from './helpers/kafka.js';

// Bad settings must exit non-zero with one line that names the setting, and touch nothing.
const sentinel = uniqueName('sentinel');
let pool: pg.Pool;
before(async () => {
  pool = new pg.Pool({ connectionString: DATABASE_URL });
  // The injection below tries `drop table y`: give it a y to drop.
  await pool.query('CREATE TABLE IF NOT EXISTS public.y (id int)');
  await pool.query(`CREATE TABLE public.${sentinel} (id int)`);
});
after(async () => {
  await pool.query(`DROP TABLE IF EXISTS public.${sentinel}`);
  await pool.end();
});

async function schemas(): Promise<string[]> {
  const { rows } = await pool.query<{ nspname: string }>('SELECT nspname FROM pg_namespace ORDER BY 1');
  return rows.map((r) => r.nspname).filter((n) => !n.startsWith('t') && !n.includes('_')); // ignore concurrent tests' own schemas
}

async function runCli(args: string[], env: Record<string, string>): Promise<{ code: number | string; lines: string[] }> {
  const p = spawnCli(args, { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(','), ...env });
  const code = await p.exited;
  return { code, lines: p.output().trim().split('\n').filter((l) => l !== '') };
}

const cases: Array<{ name: string; args: string[]; env?: Record<string, string>; code: number; pattern: RegExp }> = [
  {
    name: 'an unreachable database',
    args: ['run'],
    env: { DATABASE_URL: 'postgres://relay:s3cret-pw@127.0.0.1:1/test' },
    code: 1,
    pattern: /^outbox-relay: cannot connect to Postgres at 127\.0\.0\.1:1\/test/,
  },
  { name: 'a malformed broker list', args: ['run', '--kafka-brokers', '127.0.0.1:9092,broker-without-port'], code: 2, pattern: /^outbox-relay: --kafka-brokers: "broker-without-port" is not host:port/ },
  { name: 'a broker port out of range', args: ['run'], env: { KAFKA_BROKERS: '127.0.0.1:99999' }, code: 2, pattern: /^outbox-relay: KAFKA_BROKERS: / },
  { name: 'an injected schema name (run)', args: ['run', '--schema', 'x"; drop table y; --'], code: 2, pattern: /^outbox-relay: --schema: .* is not a valid name/ },
  { name: 'an injected schema name (migrate)', args: ['migrate', '--schema', 'x"; drop table y; --'], code: 2, pattern: /^outbox-relay: --schema: .* is not a valid name/ },
  { name: 'an injected schema name from the environment', args: ['migrate'], env: { OUTBOX_SCHEMA: 'x"; drop table y; --' }, code: 2, pattern: /^outbox-relay: OUTBOX_SCHEMA: / },
  { name: 'a negative batch size', args: ['run', '--batch-size', '-5'], code: 2, pattern: /^outbox-relay: --batch-size: -5 is not a whole number from 1 to 10000$/ },
  { name: 'a batch size that is not a number', args: ['run'], env: { OUTBOX_BATCH_SIZE: '10x' }, code: 2, pattern: /^outbox-relay: OUTBOX_BATCH_SIZE: "10x" is not a whole number/ },
  { name: 'a database URL that is not a URL', args: ['run'], env: { DATABASE_URL: 'host=localhost password=hunter2' }, code: 2, pattern: /^outbox-relay: DATABASE_URL: is not a URL/ },
  { name: 'a schema that was never migrated', args: ['run', '--schema', 'never_migrated_schema'], code: 1, pattern: /^outbox-relay: schema "never_migrated_schema" has no outbox tables: run `outbox-relay migrate` first$/ },
  { name: 'an unknown flag', args: ['run', '--batchsize', '5'], code: 2, pattern: /unknown option '--batchsize'/ },
];

for (const c of cases) {
  test(`integration: ${c.name} exits ${c.code} with one clear line and touches nothing`, async () => {
    const before = await schemas();
    const { code, lines } = await runCli(c.args, c.env ?? {});
    assert.equal(code, c.code, lines.join('\n'));
    assert.equal(lines.length, 1, `one line, got:\n${lines.join('\n')}`);
    assert.match(lines[0]!, c.pattern);
    assert.doesNotMatch(lines[0]!, /s3cret-pw|hunter2/, 'never echoes a secret');
    assert.deepEqual(await schemas(), before, 'no schema created or dropped');
    const { rows } = await pool.query(`SELECT to_regclass('public.y') AS y, to_regclass('public.${sentinel}') AS s`);
    assert.ok(rows[0].y && rows[0].s, 'tables untouched');
  });
}

test('integration: migrate --print needs no database and shows the SQL with the schema filled in', async () => {
  const { code, lines } = await runCli(['migrate', '--print', '--schema', 'app_events'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
  assert.equal(code, 0);
  const text = lines.join('\n');
  assert.match(text, /CREATE TABLE "app_events"\.outbox \(/);
  assert.match(text, /INSERT INTO "app_events"\.outbox_migrations/);
  assert.doesNotMatch(text, /:"schema"/);
});
