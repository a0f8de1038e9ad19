// Idle cost of one relay: % of a core used by the relay process and by its Postgres
// backends over a quiet window (no rows), from /proc/<pid>/stat (utime + stime).
//   KAFKA_BROKERS=... npx tsx bench/idleCost.ts [seconds]
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { migrate } from '../src/commands/migrate.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.argv[2] ?? 10);
const TICKS = 100; // USER_HZ

function cpuTicks(pid: number | 'self'): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
}

const schema = `idle_${Date.now().toString(36)}`;
await migrate({ databaseUrl: DATABASE_URL, schema });
const admin = new pg.Client({ connectionString: DATABASE_URL });
await admin.connect();
const relay = createRelay({ databaseUrl: DATABASE_URL, kafkaBrokers: (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(','), schema });
await relay.start();
await new Promise((r) => setTimeout(r, 3_000)); // shards taken, probe backed off
const backends = async (): Promise<number[]> =>
  (await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 || '%'`, [relay.applicationName])).rows.map((r) => r.pid);
const pids = await backends();
const before = { self: cpuTicks('self'), pg: pids.map((p) => cpuTicks(p)) };
await new Promise((r) => setTimeout(r, seconds * 1_000));
const after = { self: cpuTicks('self'), pg: pids.map((p) => { try { return cpuTicks(p); } catch { return 0; } }) };
const pct = (ticks: number): number => (100 * ticks) / TICKS / seconds;
const relayPct = pct(after.self - before.self);
const pgPct = pct(after.pg.reduce((a, b) => a + b, 0) - before.pg.reduce((a, b) => a + b, 0));
console.log(JSON.stringify({ seconds, backends: pids.length, relayProcessPctOfCore: +relayPct.toFixed(2), postgresBackendsPctOfCore: +pgPct.toFixed(2), load: readFileSync('/proc/loadavg', 'utf8').trim() }));
await relay.stop();
await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
await admin.end();
