// One line per run of this directory (README.md): commit → ack p50 / p99, transactions per
// second, rows per transaction, Kafka's refusals per transaction, and each request's p50 ms.
//   node bench/committed/eos-requests-2026-12-06/table.mjs <dir of runs>
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { percentile as pct, readRun } from './runs.mjs';

const dir = process.argv[2];
/** The requests of a transaction, in the order the default client sends them (Kafka's API keys). */
const API = [25, 24, 0, 28, 26];
const runs = readdirSync(dir).filter((d) => /^[A-Z]+\d-(eos|alo)-\d+$/.test(d)).sort();
console.log('| run | rows | commit → ack p50 / p99 ms | transactions/s | rows per transaction | refused per transaction (code) | AddOffsetsToTxn | AddPartitionsToTxn | Produce | TxnOffsetCommit | EndTxn (p50 ms of the answered) |');
console.log('|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|');
for (const run of runs) {
  const { requests: lines, latency: l, seconds: span } = readRun(join(dir, run));
  const commits = lines.filter((x) => x.api === 26 && !x.error).length;
  const refused = {};
  for (const x of lines) if (x.errors) for (const e of new Set(x.errors)) refused[e] = (refused[e] ?? 0) + 1;
  const p50 = (api) => pct(lines.filter((x) => x.api === Number(api) && !x.error).map((x) => x.ms).sort((a, b) => a - b), 0.5);
  const cells = API.map((api) => (Number.isNaN(p50(api)) ? '' : p50(api).toFixed(1)));
  const ref = commits ? Object.entries(refused).map(([k, v]) => `${(v / commits).toFixed(2)} ${k}`).join(', ') || '0' : '';
  console.log(`| ${run} | ${l.rows} | ${l.p50.toFixed(1)} / ${l.p99.toFixed(1)} | ${commits ? (commits / span).toFixed(1) : ''} | ${commits ? (l.rows / commits).toFixed(1) : ''} | ${ref} | ${cells.join(' | ')} |`);
}
// Kafka's own producer (run.mts's refacks and reftx arms): no requests file, only its figures.
for (const f of readdirSync(dir).filter((x) => /^latency-.*\.json$/.test(x)).sort()) {
  const { rate, results } = JSON.parse(readFileSync(join(dir, f), 'utf8'));
  for (const key of ['refacks', 'reftx']) {
    const r = results[key];
    if (!r) continue;
    const cells = [`${f.replace(/^latency-|\.json$/g, '')} ${key} (${r.client}, ${r.mode}, ${rate} rows/s)`, r.rows, `${r.p50.toFixed(1)} / ${r.p99.toFixed(1)}`, '', r.transactions > 0 ? (r.rows / r.transactions).toFixed(1) : '', '', '', '', '', '', ''];
    console.log(`| ${cells.join(' | ')} |`);
  }
}
