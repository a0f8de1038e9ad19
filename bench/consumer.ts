// Consumer throughput: our consumer (dedup row + a one-row effect per message, in
// transactions of messagesPerTransaction, offsets committed after each transaction)
// against a raw kafkajs consumer (eachBatch, no database) reading the same topic in the
// same run: the suite's consumer section (bench/sections/consumer.ts) with arms of your
// choosing, and the Node CPU per message of each.
//
//   npx tsx bench/consumer.ts
//
// Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
// KAFKA_BROKERS (default 127.0.0.1:19092), BENCH_MESSAGES (default 50000),
// BENCH_PARTITIONS (default 4), BENCH_MESSAGES_PER_TRANSACTION (default 50),
// BENCH_ARMS (default `<per transaction>:on-failure:<partitions>`, a comma-separated list of
// `messagesPerTransaction:savepoints:batchesInFlight`, savepoints `on-failure`, `always`, or
// `batch` for handleBatch; a batch arm at the section's defaults is added when none is
// given, and a batch arm with 3 poison messages per 20,000 beside it), BENCH_ROUNDS (default 1), BENCH_OUT
// (default bench/results/<stamp>-consumer/).
import { runSections } from './harness.js';
import { resultsDir } from './report.js';
import { consumer, type ConsumerArm, type ConsumerData } from './sections/consumer.js';

process.env.KAFKA_BROKERS ||= '127.0.0.1:19092';
const messages = Number(process.env.BENCH_MESSAGES ?? 50_000);
const partitions = Number(process.env.BENCH_PARTITIONS ?? 4);
const perTransaction = Number(process.env.BENCH_MESSAGES_PER_TRANSACTION ?? 50);
const rounds = Number(process.env.BENCH_ROUNDS ?? 1);
const arms: ConsumerArm[] = (process.env.BENCH_ARMS ?? `${perTransaction}:on-failure:${partitions}`).split(',').map((a) => {
  const [n, sp, c] = a.split(':');
  const savepoints = sp === 'always' ? 'always' : 'on-failure';
  const batch = sp === 'batch';
  const batchesInFlight = Number(c ?? partitions);
  return {
    key: a,
    label: batch
      ? `consumer, handleBatch: dedup + one-row effect, ${n}/transaction, ${batchesInFlight} at once`
      : `consumer, dedup + one-row effect, ${n}/transaction, savepoints ${savepoints}, ${batchesInFlight} at once`,
    savepoints,
    batch,
    messagesPerTransaction: Number(n),
    batchesInFlight,
  };
});
let data: ConsumerData | undefined;

process.exitCode = await runSections({
  name: 'bench/consumer.ts',
  outDir: process.env.BENCH_OUT ?? resultsDir('consumer'),
  facts: { messages, partitions, rounds },
  poolMax: partitions + 2,
  sections: [
    {
      name: 'consumer',
      title: '4. consumer',
      run: async (pool) => {
        const r = await consumer(pool, { messages, partitions, rounds, arms });
        data = r.data;
        return r;
      },
    },
  ],
});
for (const arm of data?.arms ?? []) {
  const per = (xs: number[]): string => xs.map((x) => x.toFixed(1)).join(', ');
  console.log(`${arm.key}: ${arm.transactions.join(', ')} transactions, node CPU ${per(arm.cpuUsPerMessage)} µs/message`);
}
