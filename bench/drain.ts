/**
 * Drain rate of a backlog for a few relay settings (batch size, batches in flight), next to
 * the ceilings (a raw kafkajs producer sending the same messages with acks=all, no
 * Postgres; a raw claim-and-mark loop, no Kafka), all in one run: the ceilings and drain
 * sections of the suite (bench/sections/), with more settings compared.
 *
 *   scripts/with-kafka.sh npx tsx bench/drain.ts [rows] [keys]
 *
 * Results in bench/results/<stamp>-drain/ (or BENCH_OUT).
 */
import { runSections } from './harness.js';
import { resultsDir } from './report.js';
import { ceilings } from './sections/ceilings.js';
import { drain } from './sections/drain.js';

const rows = Number(process.argv[2] ?? 100_000);
const keys = Number(process.argv[3] ?? 10_000);
let ceiling1 = NaN;

process.exitCode = await runSections({
  name: 'bench/drain.ts',
  outDir: process.env.BENCH_OUT ?? resultsDir('drain'),
  facts: { rows, keys },
  sections: [
    {
      name: 'ceilings',
      title: '1. ceilings',
      run: async (pool) => {
        const r = await ceilings(pool, { rows, keys });
        ceiling1 = r.data.kafkaProducer;
        return r;
      },
    },
    {
      name: 'drain',
      title: '2. relay drain',
      needs: ['ceilings'],
      run: (pool) => drain(pool, { rows, keys, ceiling: ceiling1, compare: [{ batchesInFlight: 1 }, { batchSize: 1000 }, { batchesInFlight: 4 }] }),
    },
  ],
});
