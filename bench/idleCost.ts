// Idle cost of one relay: % of a core used by the relay process and by its Postgres
// backends over a quiet window (no rows), from /proc/<pid>/stat (utime + stime).
//   KAFKA_BROKERS=... npx tsx bench/idleCost.ts [seconds]
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { migrate } from '../src/commands/migrate.js';
import { TICKS_PER_SECOND, backendPids, cpuTicks } from './procCpu.js';

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.argv[2] ?? 10);

const schema = `idle_${Date.now().toString(36)}`;
await migrate({ databaseUrl: DATABASE_URL, schema });
const admin = new pg.Client({ connectionString: DATABASE_URL });
await admin.connect();
const relay = createRelay({ databaseUrl: DATABASE_URL, kafkaBrokers: (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(','), schema });
await relay.start();
await new Promise((r) => setTimeout(r, 3_000)); // shards taken, probe backed off
const pids = await backendPids(admin, relay.applicationName);
const before = { self: cpuTicks('self') ?? 0, pg: pids.map((p) => cpuTicks(p) ?? 0) };
await new Promise((r) => setTimeout(r, seconds * 1_000));
// A backend gone meanwhile (a pool connection closed) counts as nothing more.
const after = { self: cpuTicks('self') ?? 0, pg: pids.map((p, i) => cpuTicks(p) ?? before.pg[i]!) };
const pct = (ticks: number): number => (100 * ticks) / TICKS_PER_SECOND / seconds;
const relayPct = pct(after.self - before.self);
const pgPct = pct(after.pg.reduce((a, b) => a + b, 0) - before.pg.reduce((a, b) => a + b, 0));
console.log(JSON.stringify({ seconds, backends: pids.length, relayProcessPctOfCore: +relayPct.toFixed(2), postgresBackendsPctOfCore: +pgPct.toFixed(2), load: readFileSync('/proc/loadavg', 'utf8').trim() }));
await relay.stop();
await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
await admin.end();
