// Per-call buffer hits of each statement between two snapshots of pg_stat_statements:
// seconds 10-45 (clean) and 120-155 (80-115 s into the hold). node summarize.mjs
import { readFileSync } from 'node:fs';
const { snapshots } = JSON.parse(readFileSync(new URL('./pg_stat_statements.json', import.meta.url)));
const windows = [['clean', 0, 1], ['held', 2, 3]];
for (const [name, a, b] of windows) {
  const before = new Map(snapshots[a].rows.map((r) => [r.queryid, r]));
  const rows = snapshots[b].rows.map((r) => {
    const p = before.get(r.queryid) ?? { calls: 0, shared_blks_hit: 0 };
    return { calls: r.calls - p.calls, hits: r.shared_blks_hit - p.shared_blks_hit, q: r.q };
  }).filter((r) => r.calls > 0).sort((x, y) => y.hits - x.hits).slice(0, 6);
  console.log(`${name} (seconds ${snapshots[a].t.toFixed(0)}-${snapshots[b].t.toFixed(0)}):`);
  for (const r of rows) console.log(`  ${String(Math.round(r.hits / r.calls)).padStart(6)} hits/call ${String(r.calls).padStart(6)} calls  ${r.q.slice(0, 90)}`);
}
