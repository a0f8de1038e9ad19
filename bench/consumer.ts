// Consumer throughput: our consumer (dedup row + a one-row effect per message, in
// transactions of messagesPerTransaction with a savepoint per message, offsets committed
// after each transaction) against a raw kafkajs consumer (eachBatch, no database) reading
// the same topic in the same run.
//
//   npx tsx bench/consumer.ts
//
// Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test),
// KAFKA_BROKERS (default 127.0.0.1:19092), BENCH_MESSAGES (default 50000),
// BENCH_PARTITIONS (default 4), BENCH_MESSAGES_PER_TRANSACTION (default 50).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Kafka, logLevel } from 'kafkajs';
import { migrate } from '../src/commands/migrate.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { produceAmountMessages } from './common.js';

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:19092').split(',');
const total = Number(process.env.BENCH_MESSAGES ?? 50_000);
const partitions = Number(process.env.BENCH_PARTITIONS ?? 4);
const perTransaction = Number(process.env.BENCH_MESSAGES_PER_TRANSACTION ?? 50);
const suffix = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
const schema = `bench_${suffix}`;
const topic = `bench_${suffix}`;

const kafka = new Kafka({ clientId: 'bench', brokers, logLevel: logLevel.NOTHING });

async function setUp(): Promise<pg.Pool> {
  await migrate({ databaseUrl, schema });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: partitions + 2 });
  await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, entity text NOT NULL, amount integer NOT NULL)`);
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: true });
  await admin.disconnect();
  await produceAmountMessages(kafka, topic, total);
  return pool;
}

/** Messages per second from the first message seen to the last. */
function rate(first: number, last: number): number {
  return Math.round((total * 1000) / Math.max(1, last - first));
}

async function rawKafkajs(): Promise<number> {
  const consumer = kafka.consumer({ groupId: `bench-raw-${suffix}`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  let first = 0;
  let last = 0;
  const done = new Promise<void>((resolve) => {
    void consumer.run({
      partitionsConsumedConcurrently: partitions,
      eachBatch: async ({ batch }) => {
        if (first === 0) first = Date.now();
        for (const message of batch.messages) JSON.parse(String(message.value));
        seen += batch.messages.length;
        if (seen >= total) {
          last = Date.now();
          resolve();
        }
      },
    });
  });
  await done;
  await consumer.disconnect();
  return rate(first, last);
}

interface Arm {
  perTransaction: number;
  savepoints: 'on-failure' | 'always';
  concurrency: number;
}

async function ours(pool: pg.Pool, arm: Arm): Promise<{ rate: number; transactions: number; cpuUsPerMessage: number }> {
  let first = 0;
  let last = 0;
  let resolveDone: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  const consumer = createConsumer<{ amount: number }>({
    kafka,
    groupId: `bench-ours-${suffix}-${Math.random().toString(36).slice(2, 8)}`,
    topics: topic,
    pool,
    schema,
    partitionsConcurrency: arm.concurrency,
    messagesPerTransaction: arm.perTransaction,
    savepoints: arm.savepoints,
    maxWaitTimeMs: 100,
    handler: async (message, { client }) => {
      if (first === 0) first = Date.now();
      await client.query(`INSERT INTO "${schema}".effects (message_id, entity, amount) VALUES ($1, $2, $3)`, [
        message.messageId,
        message.key,
        message.value.amount,
      ]);
    },
  });
  consumer.on('offsetCommitted', () => {
    if (consumer.stats().processed >= total && last === 0) {
      last = Date.now();
      resolveDone();
    }
  });
  const cpu0 = process.cpuUsage();
  await consumer.start();
  await done;
  const cpu = process.cpuUsage(cpu0);
  await consumer.stop();
  return { rate: rate(first, last), transactions: consumer.stats().transactions, cpuUsPerMessage: Math.round(((cpu.user + cpu.system) / total) * 10) / 10 };
}

const pool = await setUp();
try {
  process.stdout.write(`${total} messages, ${partitions} partitions, Kafka ${brokers.join(',')}, Postgres ${new URL(databaseUrl).host}\n`);
  const raw = await rawKafkajs();
  process.stdout.write(`raw kafkajs consumer (eachBatch, no database):           ${raw} messages/s\n`);
  const arms: Arm[] = (process.env.BENCH_ARMS ?? `${perTransaction}:on-failure:${partitions}`).split(',').map((a) => {
    const [n, sp, c] = a.split(':');
    return { perTransaction: Number(n), savepoints: sp === 'always' ? 'always' : 'on-failure', concurrency: Number(c ?? partitions) };
  });
  const rounds = Number(process.env.BENCH_ROUNDS ?? 1);
  for (let round = 0; round < rounds; round++) {
    for (const arm of arms) {
      await pool.query(`TRUNCATE "${schema}".effects, "${schema}".processed_messages`);
      const result = await ours(pool, arm);
      const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".effects`);
      process.stdout.write(
        `outbox-relay consumer (dedup + one-row effect, ${arm.perTransaction}/transaction, savepoints ${arm.savepoints}, ${arm.concurrency} at once): ${result.rate} messages/s (${rows[0]?.n} effects, ${result.transactions} transactions, node CPU ${result.cpuUsPerMessage} µs/message)\n`,
      );
    }
  }
} finally {
  await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  await pool.end();
  const admin = kafka.admin();
  await admin.connect();
  await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
  await admin.disconnect();
}
