// Where a row's commit → Kafka's answer goes, step by step, in the relay at a steady rate
// (README.md). Run from the repository root with step-timing.diff applied and KAFKA_BROKERS
// set to the 3-node cluster:
//   npx tsx bench/committed/eos-steps-cluster-2026-12-05/run.mts <rate> <seconds> <rounds> <out-dir> <arms: eos,alo,reference> <tag>
import pg from 'pg';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DATABASE_URL, name } from '../../common.js';
import { latencyAt } from '../../sections/latency.js';
import { runReference } from '../../kafkaReference.js';

const [rate, seconds, rounds] = process.argv.slice(2, 5).map(Number) as [number, number, number];
const out = process.argv[5]!;
const wanted = (process.argv[6] ?? 'eos,alo,reference').split(',');
const tag = process.argv[7] ?? 'run';
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
const arms = {
  eos: () => ({ producer: 'platformatic', delivery: 'exactly-once', transactionalIdPrefix: name('steps-eos'), transactionIntervalMs: 100, exactlyOnceUnits: 2 }),
  alo: () => ({ producer: 'platformatic' }),
};
const results: Record<string, unknown[]> = { eos: [], alo: [], reference: [] };
const pct = (s: number[], q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
for (let r = 0; r < rounds; r++) {
  for (const [key, options] of Object.entries(arms)) {
    if (!wanted.includes(key)) continue;
    process.env.OUTBOX_STEPS_FILE = join(out, `steps-${tag}-${key}.jsonl`);
    const l = await latencyAt(pool, rate, seconds, false, options());
    const via = l.ackedVia();
    results[key]!.push({ round: r + 1, achieved: l.achieved, rows: l.rows, p50: pct(l.ackSorted, 0.5), p99: pct(l.ackSorted, 0.99), via });
    console.log(key, r + 1, JSON.stringify(results[key]!.at(-1)));
  }
  if (!wanted.includes('reference')) continue;
  const ref = await runReference({ rate, seconds, mode: 'transactions', units: 2, retryBackoffMs: 2 });
  results.reference!.push({ round: r + 1, client: ref.client, rows: ref.rows, transactions: ref.transactions, p50: pct(ref.latencies, 0.5), p99: pct(ref.latencies, 0.99) });
  console.log('reference', r + 1, JSON.stringify(results.reference!.at(-1)));
}
writeFileSync(join(out, `latency-${tag}.json`), JSON.stringify({ rate, seconds, rounds, brokers: process.env.KAFKA_BROKERS, results }, null, 1));
await pool.end();
