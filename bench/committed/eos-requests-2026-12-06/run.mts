// Exactly-once against at-least-once at a steady rate, the relay alone (bench/sections/latency.ts,
// as section 16's latency runs), with every Kafka request of the relay process timed by
// requests.mjs (README.md). Run from the root of the tree under test:
//   npx tsx bench/committed/eos-requests-2026-12-06/run.mts <rate> <seconds> <out-dir> <arms: eos,alo,refacks,reftx> <tag>
// refacks and reftx: Kafka's own producer (bench/kafkaReference.ts), no Postgres, 2 units,
// acks=all sends or a transaction per unit's waiting rows (retry.backoff.ms 2).
import pg from 'pg';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DATABASE_URL, name } from '../../common.js';
import { latencyAt } from '../../sections/latency.js';
import { runReference } from '../../kafkaReference.js';

const [rate, seconds] = process.argv.slice(2, 4).map(Number) as [number, number];
const out = resolve(process.argv[4]!);
const wanted = (process.argv[5] ?? 'eos,alo').split(',');
const tag = process.argv[6] ?? 'run';
const preload = fileURLToPath(new URL('./requests.mjs', import.meta.url));
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
const arms: Record<string, () => Record<string, unknown>> = {
  eos: () => ({ producer: 'platformatic', delivery: 'exactly-once', transactionalIdPrefix: name('req-eos'), transactionIntervalMs: 100, exactlyOnceUnits: 2 }),
  alo: () => ({ producer: 'platformatic' }),
};
const pct = (s: number[], q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
const results: Record<string, unknown> = {};
for (const key of wanted) {
  if (key === 'refacks' || key === 'reftx') {
    const ref = await runReference({ rate, seconds, mode: key === 'reftx' ? 'transactions' : 'acks', units: 2, retryBackoffMs: 2 });
    results[key] = { client: ref.client, mode: ref.mode, rows: ref.rows, transactions: ref.transactions, p50: pct(ref.latencies, 0.5), p95: pct(ref.latencies, 0.95), p99: pct(ref.latencies, 0.99) };
    console.log(tag, key, rate, JSON.stringify(results[key]));
    continue;
  }
  const dir = join(out, `${tag}-${key}-${rate}`);
  mkdirSync(dir, { recursive: true });
  process.env.OUTBOX_REQUESTS_DIR = dir;
  // The relay child inherits the environment: the preload goes in for this arm only.
  const nodeOptions = process.env.NODE_OPTIONS;
  process.env.NODE_OPTIONS = `${nodeOptions ?? ''} --import ${preload}`.trim();
  const l = await latencyAt(pool, rate, seconds, false, arms[key]!()).finally(() => {
    if (nodeOptions === undefined) delete process.env.NODE_OPTIONS;
    else process.env.NODE_OPTIONS = nodeOptions;
  });
  results[key] = { achieved: l.achieved, rows: l.rows, p50: pct(l.ackSorted, 0.5), p95: pct(l.ackSorted, 0.95), p99: pct(l.ackSorted, 0.99), via: l.ackedVia() };
  console.log(tag, key, rate, JSON.stringify(results[key]));
}
// Another invocation with the same tag and rate (other arms) adds its arms to the file.
const file = join(out, `latency-${tag}-${rate}.json`);
const earlier = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { results: Record<string, unknown> }).results : {};
writeFileSync(file, JSON.stringify({ rate, seconds, brokers: process.env.KAFKA_BROKERS, results: { ...earlier, ...results } }, null, 1));
await pool.end();
