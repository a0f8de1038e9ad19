// Per-statement Postgres time, calls and buffers per call of the 600 s hold (after leases
// moved to the heartbeat): clean, and 30-60, 300-330 and 560-590 s into the hold.
// node summarize600.mjs [FILE]  (default pg_stat_statements-600s.json; the run after the
// low-water mark: pg_stat_statements-600s-lowwater.json)
import { readFileSync } from 'node:fs';
const file = process.argv[2] ?? 'pg_stat_statements-600s.json';
const { snaps, phases } = JSON.parse(readFileSync(new URL(`./${file}`, import.meta.url)));
const near = (t) => snaps.reduce((a, b) => (Math.abs(b.t - t) < Math.abs(a.t - t) ? b : a));
const windows = [['clean', 8, 38], ['held 30-60 s', 70, 100], ['held 300-330 s', 340, 370], ['held 560-590 s', 600, 630]];
console.log(JSON.stringify(phases));
for (const [name, ta, tb] of windows) {
  const A = near(ta), B = near(tb);
  const before = new Map(A.rows.map((r) => [r.queryid, r]));
  const rows = B.rows.map((r) => {
    const p = before.get(r.queryid) ?? { calls: 0, shared_blks_hit: 0, shared_blks_read: 0, total_exec_time: 0 };
    return { calls: r.calls - p.calls, hits: r.shared_blks_hit - p.shared_blks_hit, reads: r.shared_blks_read - p.shared_blks_read, ms: r.total_exec_time - p.total_exec_time, q: r.q };
  }).filter((r) => r.calls > 0).sort((x, y) => y.ms - x.ms);
  console.log(`${name} (seconds ${A.t.toFixed(0)}-${B.t.toFixed(0)}): total exec ${rows.reduce((s, r) => s + r.ms, 0).toFixed(0)} ms`);
  for (const r of rows.slice(0, 8)) console.log(`  ${r.ms.toFixed(0).padStart(7)} ms ${String(r.calls).padStart(6)} calls ${String(Math.round(r.hits / r.calls)).padStart(7)} hits/call ${String(Math.round(r.reads / r.calls)).padStart(5)} reads/call  ${r.q.slice(0, 100)}`);
}
