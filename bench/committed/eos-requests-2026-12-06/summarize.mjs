// Prints, for each run directory given (run.mts's <tag>-<arm>-<rate>), the relay's Kafka
// requests by API: how many, how many answered with an error (and which), and the time from
// the wire to the answer, p50 / p99 / mean ms; then transactions (EndTxn) and rows per one.
//   node bench/committed/eos-requests-2026-12-06/summarize.mjs <out-dir>/<tag>-eos-1000 ...
import { basename } from 'node:path';
import { API_NAMES, percentile, readRun } from './runs.mjs';

for (const dir of process.argv.slice(2)) {
  const { requests, latency, seconds } = readRun(dir);
  console.log(`\n${basename(dir)}: rows ${latency.rows}, commit → ack p50 ${latency.p50.toFixed(1)} / p95 ${latency.p95.toFixed(1)} / p99 ${latency.p99.toFixed(1)} ms, via ${JSON.stringify(latency.via)}`);
  const by = new Map();
  for (const r of requests) (by.get(r.api) ?? by.set(r.api, []).get(r.api)).push(r);
  console.log('| API | requests | per s | errors | p50 ms | p99 ms | mean ms |');
  console.log('|---|---:|---:|---|---:|---:|---:|');
  for (const [api, rs] of [...by].sort((a, b) => b[1].length - a[1].length)) {
    const ms = rs.map((r) => r.ms).sort((a, b) => a - b);
    const errors = {};
    for (const r of rs) if (r.error) for (const e of new Set(r.errors ?? [r.error])) errors[e] = (errors[e] ?? 0) + 1;
    const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
    console.log(`| ${API_NAMES[api] ?? api} | ${rs.length} | ${(rs.length / seconds).toFixed(1)} | ${Object.entries(errors).map(([k, v]) => `${k} ${v}`).join(', ') || '0'} | ${percentile(ms, 0.5).toFixed(1)} | ${percentile(ms, 0.99).toFixed(1)} | ${mean.toFixed(1)} |`);
  }
  const commits = (by.get(26) ?? []).filter((r) => !r.error).length;
  if (commits) console.log(`transactions committed (EndTxn answered without error): ${commits}; rows per transaction ${(latency.rows / commits).toFixed(1)} (warm-up included in the count of transactions)`);
}
