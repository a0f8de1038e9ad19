/**
 * What polling costs and buys, measured side by side in one run:
 *  1. pick-up latency at low load: one row committed every 20 ms, time from the writer's
 *     COMMIT returning to Kafka acknowledging the batch that carried it;
 *  2. cost to the application's writes: pgbench, 4 clients, each transaction inserting
 *     one outbox row, commits/s in three arms: no relay; a relay polling (an outbox in
 *     another schema, so it only polls: the wake-up mechanism's own cost); a relay
 *     relaying everything the writers insert (wake-up plus the work of relaying, on the
 *     same 2 cores as Postgres, Kafka and pgbench). Runs alternate arm by arm, round by
 *     round, so that drift of this shared machine hits every arm alike.
 *
 *   scripts/with-kafka.sh npx tsx bench/wakeup.ts [seconds-per-pgbench-run] [rounds]
 */
import pg from 'pg';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRelay } from '../src/relay/relay.js';
import { DATABASE_URL, benchSchema, brokers, createTopic } from './common.js';
import { percentile } from './util.js';

const SECONDS = Number(process.argv[2] ?? 10);
const ROUNDS = Number(process.argv[3] ?? 3);
const POLL_MS = 10;
const pool = new pg.Pool({ connectionString: DATABASE_URL });

async function pickUpLatency(): Promise<{ p50: number; p95: number; p99: number; n: number }> {
  const { schema, drop } = await benchSchema(pool, 'benchlat');
  const topic = await createTopic(3);
  const relay = createRelay({ databaseUrl: DATABASE_URL, kafkaBrokers: brokers(), schema, pollIntervalMs: POLL_MS });
  const committedAt = new Map<number, number>();
  const latencies: number[] = [];
  relay.on('batch', (b) => {
    const now = performance.now();
    for (let id = b.firstId; id <= b.lastId; id++) {
      const t = committedAt.get(id);
      if (t !== undefined) latencies.push(now - t);
    }
  });
  await relay.start();
  const client = await pool.connect();
  const n = 500;
  for (let i = 0; i < n; i++) {
    const { rows } = await client.query<{ id: number }>(
      `INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, $2, '{"x":1}') RETURNING id`,
      [topic, `k${i % 50}`],
    );
    committedAt.set(Number(rows[0]!.id), performance.now()); // autocommit: the insert has committed
    await new Promise((r) => setTimeout(r, 20));
  }
  client.release();
  while (latencies.length < n) await new Promise((r) => setTimeout(r, 50));
  await relay.stop();
  await drop();
  latencies.sort((a, b) => a - b);
  return { p50: percentile(latencies, 50), p95: percentile(latencies, 95), p99: percentile(latencies, 99), n };
}

function pgbench(schema: string, topic: string): number {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-'));
  const script = join(dir, 'insert.sql');
  writeFileSync(
    script,
    `\\set k random(1, 10000)\nBEGIN;\nINSERT INTO "${schema}".outbox (topic, key, payload) VALUES ('${topic}', 'key-' || :k, '{"type":"order_updated","pad":"${'x'.repeat(150)}"}');\nCOMMIT;\n`,
  );
  const url = new URL(DATABASE_URL);
  const out = execFileSync(
    'pgbench',
    ['-n', '-c', '4', '-j', '2', '-T', String(SECONDS), '-f', script, '-h', url.hostname, '-p', url.port || '5432', '-U', url.username || 'postgres', url.pathname.slice(1)],
    { encoding: 'utf8' },
  );
  const m = /tps = ([\d.]+)/.exec(out);
  if (!m) throw new Error(`pgbench output not understood:\n${out}`);
  return Number(m[1]);
}

async function withRelay<T>(schema: string, body: () => T): Promise<T> {
  const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
  const relay = spawn(process.execPath, ['--import', 'tsx', cli, 'run', '--poll-interval-ms', String(POLL_MS), '--log-level', 'warn'], {
    env: { ...process.env, DATABASE_URL, KAFKA_BROKERS: brokers().join(','), OUTBOX_SCHEMA: schema, OUTBOX_METRICS_ADDRESS: '127.0.0.1:0' },
    stdio: 'inherit',
  });
  await new Promise((r) => setTimeout(r, 2_000)); // node + tsx boot; pgbench must not start before it polls
  try {
    return body();
  } finally {
    relay.kill('SIGTERM');
    await new Promise((r) => relay.on('exit', r));
  }
}

async function writeCost(): Promise<{ off: number[]; polling: number[]; relaying: number[] }> {
  const { schema, drop } = await benchSchema(pool, 'benchcost');
  const other = await benchSchema(pool, 'benchidle');
  const topic = await createTopic(6);
  const off: number[] = [];
  const polling: number[] = [];
  const relaying: number[] = [];
  const reset = async (): Promise<void> => {
    // Rows left unsent would make the next relaying arm start with a backlog drain.
    await pool.query(`UPDATE "${schema}".outbox SET sent_at = now() WHERE sent_at IS NULL`);
    await pool.query(`VACUUM "${schema}".outbox`);
  };
  for (let round = 0; round < ROUNDS; round++) {
    off.push(pgbench(schema, topic));
    await reset();
    polling.push(await withRelay(other.schema, () => pgbench(schema, topic)));
    await reset();
    relaying.push(await withRelay(schema, () => pgbench(schema, topic)));
    await reset();
  }
  await drop();
  await other.drop();
  return { off, polling, relaying };
}

const latency = await pickUpLatency();
const cost = await writeCost();
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
const pollingRatio = mean(cost.polling) / mean(cost.off);
const relayingRatio = mean(cost.relaying) / mean(cost.off);
console.log(`\nPick-up latency at low load (poll ${POLL_MS} ms; one row every 20 ms, ${latency.n} rows), commit -> Kafka ack:`);
console.log(`  p50 ${latency.p50.toFixed(1)} ms, p95 ${latency.p95.toFixed(1)} ms, p99 ${latency.p99.toFixed(1)} ms`);
console.log(`\nApplication commit throughput, pgbench 4 clients x ${SECONDS} s, ${ROUNDS} rounds alternating:`);
const row = (label: string, xs: number[], r?: number): void =>
  console.log(`  ${label.padEnd(28)} ${xs.map((x) => x.toFixed(0)).join(', ')} tps (mean ${mean(xs).toFixed(0)}${r === undefined ? '' : `, ${r.toFixed(3)} x no relay`})`);
row('no relay:', cost.off);
row('relay polling (wake-up):', cost.polling, pollingRatio);
row('relay relaying every row:', cost.relaying, relayingRatio);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(
  new URL(`./results/wakeup-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url),
  JSON.stringify({ pollIntervalMs: POLL_MS, latency, cost, pollingRatio, relayingRatio }, null, 2),
);
await pool.end();
