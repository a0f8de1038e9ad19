/**
 * One relay vs two (separate processes) draining the same backlog, in one run, and the
 * per-key order of what they published: the suite's scale section (bench/sections/scale.ts)
 * without the backlog-size part, with the order read back from Kafka.
 *
 * The relays start on an empty outbox and settle their shards first; the backlog is then
 * committed in one transaction and the clock runs from that commit until every row is
 * marked sent.
 *
 *   scripts/with-kafka.sh npx tsx bench/scale.ts [rows] [rounds]
 *
 * Results in bench/results/<stamp>-scale/ (or BENCH_OUT).
 */
import { runSections } from './harness.js';
import { resultsDir } from './report.js';
import { scale } from './sections/scale.js';

const rows = Number(process.argv[2] ?? 100_000);
const rounds = Number(process.argv[3] ?? 2);

process.exitCode = await runSections({
  name: 'bench/scale.ts',
  outDir: process.env.BENCH_OUT ?? resultsDir('scale'),
  facts: { rows, rounds },
  sections: [{ name: 'scale', title: '5. scale', run: (pool) => scale(pool, { rows, rounds, checkOrder: true }) }],
});
