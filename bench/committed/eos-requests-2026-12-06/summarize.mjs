// Prints, for each run directory given (run.mts's <tag>-<arm>-<rate>), the relay's Kafka
// requests by API: how many, how many answered with an error (and which), and the time from
// the wire to the answer, p50 / p99 / mean ms; then transactions (EndTxn) and rows per one.
//   node bench/committed/eos-requests-2026-12-06/summarize.mjs <out-dir>/<tag>-eos-1000 ...
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { join, basename, dirname } from 'node:path';

const NAMES = { 0: 'Produce', 3: 'Metadata', 8: 'OffsetCommit', 9: 'OffsetFetch', 10: 'FindCoordinator', 18: 'ApiVersions', 22: 'InitProducerId', 24: 'AddPartitionsToTxn', 25: 'AddOffsetsToTxn', 26: 'EndTxn', 28: 'TxnOffsetCommit' };
const pct = (s, q) => (s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : NaN);
for (const dir of process.argv.slice(2)) {
  // A run's directory holds one requests-<pid>.jsonl per relay process (run.mts), or those
  // files put together as requests.jsonl.gz (what is committed).
  const text = (f) => (f.endsWith('.gz') ? gunzipSync(readFileSync(join(dir, f))) : readFileSync(join(dir, f))).toString('utf8');
  const lines = readdirSync(dir).filter((f) => f.startsWith('requests')).flatMap((f) => text(f).split('\n').filter(Boolean).map((l) => JSON.parse(l)));
  const [tag, arm, rate] = basename(dir).split(/-(?=[^-]+-[^-]+$)|-(?=[^-]+$)/);
  const latencyFile = join(dirname(dir), `latency-${tag}-${rate}.json`);
  const latency = existsSync(latencyFile) ? JSON.parse(readFileSync(latencyFile, 'utf8')).results[arm] : undefined;
  console.log(`\n${basename(dir)}: ${latency ? `rows ${latency.rows}, commit → ack p50 ${latency.p50.toFixed(1)} / p95 ${latency.p95.toFixed(1)} / p99 ${latency.p99.toFixed(1)} ms, via ${JSON.stringify(latency.via)}` : ''}`);
  const span = (Math.max(...lines.map((l) => l.at)) - Math.min(...lines.map((l) => l.at))) / 1000;
  const by = new Map();
  for (const l of lines) (by.get(l.api) ?? by.set(l.api, []).get(l.api)).push(l);
  console.log('| API | requests | per s | errors | p50 ms | p99 ms | mean ms |');
  console.log('|---|---:|---:|---|---:|---:|---:|');
  for (const [api, ls] of [...by].sort((a, b) => b[1].length - a[1].length)) {
    const ms = ls.map((l) => l.ms).sort((a, b) => a - b);
    const errors = {};
    for (const l of ls) if (l.error) for (const e of new Set(l.errors ?? [l.error])) errors[e] = (errors[e] ?? 0) + 1;
    const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
    console.log(`| ${NAMES[api] ?? api} | ${ls.length} | ${(ls.length / span).toFixed(1)} | ${Object.entries(errors).map(([k, v]) => `${k} ${v}`).join(', ') || '0'} | ${pct(ms, 0.5).toFixed(1)} | ${pct(ms, 0.99).toFixed(1)} | ${mean.toFixed(1)} |`);
  }
  const commits = (by.get(26) ?? []).filter((l) => !l.error).length;
  if (commits && latency) console.log(`transactions committed (EndTxn answered without error): ${commits}; rows per transaction ${(latency.rows / commits).toFixed(1)} (warm-up included in the count of transactions)`);
}
