/**
 * Where a relay's Postgres time goes at a steady load, statement by statement: a private
 * PostgreSQL 15 (scripts/localPostgres.ts) with pg_stat_statements loaded (the shared
 * server does not load it), a relay in this process at its defaults, pgbench writers
 * offering `rate` rows/s (8 clients, Poisson arrivals, one autocommit insert each) for
 * `seconds`. Prints each relay statement's calls per second and its mean planning and
 * execution time, and the CPU of the relay's backends from /proc: the horizon probe's
 * connection apart from the pool (batches, lease rounds).
 *
 *   KAFKA_BROKERS=127.0.0.1:40657 npx tsx bench/statementCost.ts [seconds] [rate]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startLocalPostgres } from '../scripts/localPostgres.js';
import { migrate } from '../src/commands/migrate.js';
import { createRelay } from '../src/relay/relay.js';
import { silentLogger } from '../src/shared/logger.js';
import { KEYS, PARTITIONS, PAYLOAD, createTopic } from './common.js';
import { CpuMeter, cpuSeconds } from './procCpu.js';

const seconds = Number(process.argv[2] ?? 20);
const rate = Number(process.argv[3] ?? 1_000);
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
if (brokers.length === 0) throw new Error('set KAFKA_BROKERS');

const server = await startLocalPostgres({
  settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track_planning': 'on', 'pg_stat_statements.max': 1000 },
});
const admin = new pg.Pool({ connectionString: server.url, max: 2 });
const schema = 'statement_cost';
try {
  await admin.query('CREATE EXTENSION pg_stat_statements');
  await migrate({ databaseUrl: server.url, schema });
  const topic = await createTopic(PARTITIONS);
  const relay = createRelay({ databaseUrl: server.url, kafkaBrokers: brokers, schema, logger: silentLogger() });
  let batches = 0;
  let rows = 0;
  relay.on('batch', (b) => {
    batches++;
    rows += b.count;
  });
  await relay.start();
  await admin.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
  while (batches === 0) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 500));

  const pidsOf = async (pattern: string): Promise<number[]> =>
    (await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1`, [pattern])).rows.map((r) => r.pid);
  const probeMeter = new CpuMeter(() => pidsOf(`${relay.applicationName}:horizon`));
  const poolMeter = new CpuMeter(() => pidsOf(relay.applicationName));
  await admin.query('SELECT pg_stat_statements_reset()');
  const batchesBefore = batches;
  const rowsBefore = rows;
  const selfBefore = cpuSeconds('self')!;
  const started = Date.now();
  await Promise.all([probeMeter.start(), poolMeter.start()]);

  const dir = mkdtempSync(join(tmpdir(), 'statement-cost-'));
  const file = join(dir, 'insert.sql');
  writeFileSync(file, `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`);
  const url = new URL(server.url);
  await new Promise<void>((resolve, reject) => {
    const p = spawn('pgbench', ['-n', '-c', '8', '-j', '2', '-R', String(rate), '-T', String(seconds), '-f', file, '-h', url.hostname, '-p', url.port, '-U', 'postgres', 'postgres'], { stdio: 'ignore' });
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`pgbench exited with ${code}`))));
  });
  for (;;) {
    const { rows: r } = await admin.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outbox WHERE sent_at IS NULL`);
    if (Number(r[0]!.n) === 0) break;
    await new Promise((res) => setTimeout(res, 20));
  }
  const [probeCpu, poolCpu] = await Promise.all([probeMeter.stop(), poolMeter.stop()]);
  const window = (Date.now() - started) / 1000;
  const relayCpu = cpuSeconds('self')! - selfBefore;
  const relayed = rows - rowsBefore;

  const { rows: stats } = await admin.query<{ query: string; calls: string; plan: number; exec: number; total: number }>(`
    SELECT query, calls, total_plan_time / calls AS plan, total_exec_time / calls AS exec, total_plan_time + total_exec_time AS total
      FROM pg_stat_statements
     WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE 'SELECT count(*) AS n FROM%' AND query NOT LIKE '%pg_stat_activity WHERE application_name LIKE%'
     ORDER BY total DESC`);
  const per100k = (cpu: number): string => ((cpu * 100_000) / relayed).toFixed(2);
  console.log(`\n${relayed} rows in ${batches - batchesBefore} batches (${((batches - batchesBefore) / window).toFixed(0)} batches/s, ${(relayed / Math.max(1, batches - batchesBefore)).toFixed(1)} rows/batch) over ${window.toFixed(1)} s`);
  console.log(`CPU-s per 100k rows: Postgres horizon connection ${per100k(probeCpu)}, pool connections ${per100k(poolCpu)}, total ${per100k(probeCpu + poolCpu)}; relay process ${per100k(relayCpu)}`);
  console.log(`% of a core: horizon ${((100 * probeCpu) / window).toFixed(1)}, pool ${((100 * poolCpu) / window).toFixed(1)}, relay process ${((100 * relayCpu) / window).toFixed(1)}\n`);
  console.log('calls/s  plan ms  exec ms  total ms  statement');
  for (const s of stats.slice(0, 25)) {
    const text = s.query.replace(/\s+/g, ' ').replaceAll(`"${schema}".`, '').slice(0, 110);
    console.log(`${(Number(s.calls) / window).toFixed(1).padStart(7)}  ${s.plan.toFixed(3).padStart(7)}  ${s.exec.toFixed(3).padStart(7)}  ${s.total.toFixed(0).padStart(8)}  ${text}`);
  }
  await relay.stop();
} finally {
  await admin.end().catch(() => undefined);
  await server.destroy();
}
