/**
 * What polling costs and buys, measured side by side in one run, with the suite's sections
 * (bench/sections/):
 *  1. pick-up latency at low load: 50 rows/s offered for 10 s, one autocommit insert each,
 *     commit → Kafka acknowledging the batch that carried it (the latency section);
 *  2. cost to the application's writes: pgbench, 4 clients, each transaction inserting
 *     one row, commits/s in three arms: a plain table, no relay; the outbox with a relay
 *     polling (an outbox in another schema, so it only polls: the wake-up mechanism's own
 *     cost); a relay relaying everything the writers insert. Runs alternate arm by arm,
 *     round by round, so that drift of this shared machine hits every arm alike (the cost
 *     section).
 *
 *   scripts/with-kafka.sh npx tsx bench/wakeup.ts [seconds-per-pgbench-run] [rounds]
 *
 * Results in bench/results/<stamp>-wakeup/ (or BENCH_OUT).
 */
import { runSections } from './harness.js';
import { resultsDir } from './report.js';
import { cost, type CostData } from './sections/cost.js';
import { latency } from './sections/latency.js';

const seconds = Number(process.argv[2] ?? 10);
const rounds = Number(process.argv[3] ?? 3);
let costData: CostData | undefined;

process.exitCode = await runSections({
  name: 'bench/wakeup.ts',
  outDir: process.env.BENCH_OUT ?? resultsDir('wakeup'),
  facts: { seconds, rounds },
  sections: [
    { name: 'latency', title: '3. pick-up latency at low load', run: (pool) => latency(pool, { seconds: 10, arms: [{ rate: 50, withConsumer: false }] }) },
    {
      name: 'cost',
      title: '7. cost to the application',
      run: async (pool) => {
        const r = await cost(pool, { seconds, rounds });
        costData = r.data;
        return r;
      },
    },
  ],
});
if (costData) {
  const runs = (xs: number[]): string => xs.map((x) => x.toFixed(0)).join(', ');
  console.log(`\ntps per round: plain ${runs(costData.plain)}; relay polling ${runs(costData.polling)}; relay relaying ${runs(costData.relaying)}`);
}
