/**
 * Drain rate of a backlog: rows/s from relay start until every row is marked sent, for a
 * few batch settings, next to the ceiling of a raw kafkajs producer sending the same
 * messages in the same batch size with acks=all (no Postgres), all in one run.
 *
 *   scripts/with-kafka.sh npx tsx bench/drain.ts [rows] [keys]
 */
import pg from 'pg';
import { writeFileSync, mkdirSync } from 'node:fs';
import { Partitioners } from 'kafkajs';
import { createRelay } from '../src/relay/relay.js';
import { DATABASE_URL, benchSchema, brokers, createTopic, fillBacklog, kafka } from './common.js';

const ROWS = Number(process.argv[2] ?? 100_000);
const KEYS = Number(process.argv[3] ?? 10_000);
const PARTITIONS = 6;
const pool = new pg.Pool({ connectionString: DATABASE_URL });

async function rawProducerCeiling(batchSize: number): Promise<number> {
  const topic = await createTopic(PARTITIONS);
  const producer = kafka().producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const payload = JSON.stringify({ i: 0, type: 'order_updated', pad: 'x'.repeat(150) });
  const started = process.hrtime.bigint();
  for (let i = 0; i < ROWS; i += batchSize) {
    const messages = Array.from({ length: Math.min(batchSize, ROWS - i) }, (_, j) => ({
      key: `key-${(i + j) % KEYS}`,
      value: payload,
      headers: { 'message-id': '00000000-0000-0000-0000-000000000000', 'outbox-id': String(i + j), 'content-type': 'application/json' },
    }));
    await producer.sendBatch({ topicMessages: [{ topic, messages }], acks: -1 });
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await producer.disconnect();
  return ROWS / seconds;
}

async function relayDrain(batchSize: number, batchesInFlight: number): Promise<number> {
  const { schema, drop } = await benchSchema(pool, 'benchdrain');
  const topic = await createTopic(PARTITIONS);
  await fillBacklog(pool, schema, topic, ROWS, KEYS);
  const relay = createRelay({ databaseUrl: DATABASE_URL, kafkaBrokers: brokers(), schema, batchSize, batchesInFlight });
  let sent = 0;
  const done = new Promise<void>((resolve) =>
    relay.on('batch', (b) => {
      sent += b.count;
      if (sent >= ROWS) resolve();
    }),
  );
  const started = process.hrtime.bigint();
  await relay.start();
  await done;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await relay.stop();
  await drop();
  return ROWS / seconds;
}

const results: Array<Record<string, string | number>> = [];
const ceiling = await rawProducerCeiling(500);
results.push({ what: 'raw kafkajs producer, batch 500, acks=all (ceiling)', rowsPerSecond: Math.round(ceiling), ratio: 1 });
for (const [batchSize, inFlight] of [
  [500, 1],
  [500, 2],
  [1000, 2],
  [500, 4],
] as const) {
  const rate = await relayDrain(batchSize, inFlight);
  results.push({ what: `relay, batch ${batchSize}, ${inFlight} in flight`, rowsPerSecond: Math.round(rate), ratio: Number((rate / ceiling).toFixed(2)) });
}
console.log(`\nDrain of a ${ROWS.toLocaleString('en')}-row backlog (${KEYS.toLocaleString('en')} keys, ~200-byte JSON, ${PARTITIONS} partitions)\n`);
console.log('| what | rows/s | ratio to ceiling |\n|---|---:|---:|');
for (const r of results) console.log(`| ${r.what} | ${r.rowsPerSecond} | ${r.ratio} |`);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL(`./results/drain-${new Date().toISOString().replace(/[:.]/g, '-')}.json`, import.meta.url), JSON.stringify({ rows: ROWS, keys: KEYS, results }, null, 2));
await pool.end();
