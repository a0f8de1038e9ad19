/**
 * One relay vs two (separate processes) draining the same backlog, in one run, and the
 * per-key order of what they published.
 *
 * The relays start on an empty outbox and settle their shards first; the backlog is then
 * committed in one transaction and the clock runs from that commit until every row is
 * marked sent.
 *
 *   scripts/with-kafka.sh npx tsx bench/scale.ts [rows] [rounds]
 */
import pg from 'pg';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { mkdirSync, writeFileSync } from 'node:fs';
import { getStatus } from '../src/commands/status.js';
import { HEADERS } from '../src/shared/kafka.js';
import { DATABASE_URL, benchSchema, brokers, createTopic, fillBacklog, kafka } from './common.js';

const ROWS = Number(process.argv[2] ?? 100_000);
const ROUNDS = Number(process.argv[3] ?? 2);
const KEYS = 10_000;
const pool = new pg.Pool({ connectionString: DATABASE_URL });
const cli = fileURLToPath(new URL('../src/cli.ts', import.meta.url));

async function until(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function reorderings(topic: string): Promise<{ delivered: number; reorderings: number }> {
  const consumer = kafka().consumer({ groupId: `bench-check-${Date.now()}`, maxWaitTimeInMs: 100 });
  const first = new Set<string>();
  const lastOfKey = new Map<string, number>();
  let bad = 0;
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      const id = message.headers?.[HEADERS.messageId]?.toString() ?? '';
      if (first.has(id)) return;
      first.add(id);
      const key = message.key?.toString() ?? '';
      const outboxId = Number(message.headers?.[HEADERS.outboxId]?.toString());
      if (outboxId < (lastOfKey.get(key) ?? 0)) bad++;
      lastOfKey.set(key, Math.max(outboxId, lastOfKey.get(key) ?? 0));
    },
  });
  await until(async () => first.size >= ROWS, 120_000);
  await consumer.disconnect();
  return { delivered: first.size, reorderings: bad };
}

async function drain(relays: number): Promise<{ rowsPerSecond: number; reorderings: number }> {
  const { schema, drop } = await benchSchema(pool, 'benchscale');
  const topic = await createTopic(6);
  const children: ChildProcess[] = [];
  for (let i = 0; i < relays; i++) {
    children.push(
      spawn(process.execPath, ['--import', 'tsx', cli, 'run', '--log-level', 'warn'], {
        env: { ...process.env, DATABASE_URL, KAFKA_BROKERS: brokers().join(','), OUTBOX_SCHEMA: schema, OUTBOX_METRICS_ADDRESS: '127.0.0.1:0', OUTBOX_LEASE_TTL_MS: '3000' },
        stdio: 'inherit',
      }),
    );
  }
  try {
    await until(async () => {
      const s = await getStatus({ client: pool as never, schema });
      const counts = s.relays.filter((r) => r.live).map((r) => r.shardCount);
      return counts.length === relays && counts.every((c) => c === 256 / relays);
    }, 60_000);
    // One transaction: the backlog becomes visible at once.
    const client = await pool.connect();
    await client.query('BEGIN');
    await fillBacklog(client as unknown as pg.Pool, schema, topic, ROWS, KEYS, false);
    await client.query('COMMIT');
    client.release();
    const started = Date.now();
    await until(async () => {
      const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".outbox WHERE sent_at IS NULL`);
      return rows[0]!.n === 0;
    }, 600_000);
    const seconds = (Date.now() - started) / 1000;
    const order = await reorderings(topic);
    return { rowsPerSecond: ROWS / seconds, reorderings: order.reorderings };
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(children.map((c) => new Promise((r) => (c.exitCode === null ? c.on('exit', r) : r(null)))));
    await drop();
  }
}

const results: Array<{ relays: number; round: number; rowsPerSecond: number; reorderings: number }> = [];
for (let round = 1; round <= ROUNDS; round++) {
  for (const relays of [1, 2]) {
    const r = await drain(relays);
    results.push({ relays, round, rowsPerSecond: Math.round(r.rowsPerSecond), reorderings: r.reorderings });
    console.log(`round ${round}: ${relays} relay(s): ${Math.round(r.rowsPerSecond)} rows/s, reorderings ${r.reorderings}`);
  }
}
const mean = (n: number): number => results.filter((r) => r.relays === n).reduce((a, r) => a + r.rowsPerSecond, 0) / ROUNDS;
console.log(`\n| relays | rows/s (mean of ${ROUNDS}) | ratio |\n|---:|---:|---:|\n| 1 | ${mean(1).toFixed(0)} | 1 |\n| 2 | ${mean(2).toFixed(0)} | ${(mean(2) / mean(1)).toFixed(2)} |`);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL(`./results/scale-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url), JSON.stringify({ rows: ROWS, results }, null, 2));
await pool.end();
