// Per-step breakdown of commit → Kafka's answer from steps-<arm>.jsonl (README.md):
//   node summarize.mjs steps-eos.jsonl
// For every row: wait (its commit to its batch's claim), claim, produce, Kafka's commit
// (exactly-once only), all in ms; then the same for the slowest 1 % of rows, and the gap
// from a worker's batch COMMIT to its next claim.
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
const file = process.argv[2];
const pct = (a, q) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };
const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
const rows = [];
const batches = [];
const gaps = [];
for (const line of (file.endsWith('.gz') ? gunzipSync(readFileSync(file)).toString('utf8') : readFileSync(file, 'utf8')).trim().split('\n')) {
  const { steps } = JSON.parse(line);
  const byWorker = new Map();
  for (const b of steps) {
    batches.push(b);
    const prev = byWorker.get(b.w);
    if (prev) gaps.push(b.s - (prev.a + prev.m));
    byWorker.set(b.w, b);
    for (const created of b.created) {
      if (!created) continue;
      rows.push({ total: b.a - created, wait: b.s - created, claim: b.c, toPublish: b.p - (b.s + b.c), produce: b.pe - b.p, commit: b.a - b.pe, k: b.k });
    }
  }
}
rows.sort((x, y) => x.total - y.total);
const f = (x) => x.toFixed(1);
const describe = (set, label) => {
  const parts = ['total', 'wait', 'claim', 'toPublish', 'produce', 'commit'].map((c) => `${c} ${f(mean(set.map((r) => r[c])))}`);
  console.log(`${label} (${set.length} rows), mean ms: ${parts.join(', ')}`);
};
console.log(`${file}: ${batches.length} batches, ${rows.length} rows; rows per batch p50 ${pct(batches.map((b) => b.n), 0.5)} / p99 ${pct(batches.map((b) => b.n), 0.99)}; claims per batch > 1 in ${batches.filter((b) => b.k > 1).length}`);
console.log(`row commit → answer p50 ${f(pct(rows.map((r) => r.total), 0.5))} / p99 ${f(pct(rows.map((r) => r.total), 0.99))} ms`);
const p99 = pct(rows.map((r) => r.total), 0.99);
describe(rows, 'all rows');
const [p45, p55] = [pct(rows.map((x) => x.total), 0.45), pct(rows.map((x) => x.total), 0.55)];
describe(rows.filter((r) => r.total >= p45 && r.total <= p55), 'rows at p45-p55');
describe(rows.filter((r) => r.total >= p99), 'rows at or above p99');
for (const [name, values] of [['claim', batches.map((b) => b.c)], ['produce', batches.map((b) => b.pe - b.p)], ['Kafka commit', batches.map((b) => b.a - b.pe)], ['mark + COMMIT', batches.map((b) => b.m)], ['COMMIT → next claim (same worker)', gaps]]) {
  console.log(`per batch, ${name}: p50 ${f(pct(values, 0.5))} / p90 ${f(pct(values, 0.9))} / p99 ${f(pct(values, 0.99))} ms`);
}
