/**
 * Commit → Kafka ack at a steady offered rate, the relay on each producer adapter, arms
 * alternating round by round (the latency section's measurement, bench/sections/latency.ts):
 *
 *   KAFKA_BROKERS=… npx tsx bench/adapterLatency.ts [rate] [seconds] [rounds]
 *
 * A single-purpose script: it prints, it writes no summary (nothing in README or docs
 * quotes it).
 */
import pg from 'pg';
import { latencyAt } from './sections/latency.js';
import { fmt } from './util.js';

const [rate = 1_000, seconds = 15, rounds = 2] = process.argv.slice(2).map(Number);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 4 });
const producers = ['kafkajs', 'platformatic'] as const;
try {
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? producers : [...producers].reverse();
    for (const producer of order) {
      const r = await latencyAt(pool, rate, seconds, false, { producer });
      process.stdout.write(`round ${round + 1} ${producer}: ${fmt(r.achieved)} rows/s achieved, commit → ack p50 ${fmt(r.ack.p50, 1)} / p95 ${fmt(r.ack.p95, 1)} / p99 ${fmt(r.ack.p99, 1)} ms\n`);
    }
  }
} finally {
  await pool.end();
}
