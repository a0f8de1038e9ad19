// Per-step percentiles of the exactly-once unit's transactions, from steps-*.jsonl (see README.md).
import { readFileSync } from 'node:fs';
const file = process.argv[2] ?? new URL('steps-c3370a7-quick.jsonl', import.meta.url);
const pct = (a, q) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(q * s.length))]; };
for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
  const { STEPS, SENDS } = JSON.parse(line);
  const cols = ['AddOffsetsToTxn', 'TxnOffsetCommit', 'EndTxn', 'rows'].map((_, i) => STEPS.map((s) => s[i]));
  const f = (a) => `p50 ${pct(a, 0.5).toFixed(1)} / p99 ${pct(a, 0.99).toFixed(1)}`;
  console.log(`${STEPS.length} transactions, ${SENDS.length} sends: send ${f(SENDS)} ms; AddOffsetsToTxn ${f(cols[0])}; TxnOffsetCommit ${f(cols[1])}; EndTxn ${f(cols[2])}; rows per transaction ${f(cols[3])}`);
}
