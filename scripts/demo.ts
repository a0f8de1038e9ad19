/**
 * The README's first command (`npm run demo`): relay and consumer runtime on real servers.
 *
 * Uses DATABASE_URL (default: this machine's Postgres, database `test`) and KAFKA_BROKERS
 * (scripts/with-kafka.sh starts a local broker when none is given). In a schema of its
 * own it: migrates; enqueues payment events in the same transactions as the order
 * changes, plus one malformed event; runs the relay; runs the example consumer service
 * (examples/consumer.ts) until every event is handled; then makes the relay publish some
 * events a second time, and shows the consumer skipping them: balances unchanged.
 */
import '../src/shared/kafkajsIdleFix.js';
import pg from 'pg';
import { Kafka, logLevel } from 'kafkajs';
import { createLogger, createRelay, enqueue, migrate, HEADERS } from '../src/index.js';
import { spawnTs } from '../test/helpers/processes.js';

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const run = Date.now().toString(36);
const schema = process.env.OUTBOX_SCHEMA ?? `outbox_demo_${run}`;
const topic = `demo.payments.${run}`;
const ORDERS = 8;
const PAYMENTS = 3;

if (brokers.length === 0) {
  console.error('demo: KAFKA_BROKERS is not set (run it as `npm run demo`, which starts a local broker)');
  process.exit(2);
}
const say = (line: string): void => void process.stdout.write(`${line}\n`);
const logger = createLogger('warn');
const pool = new pg.Pool({ connectionString: databaseUrl });

await migrate({ databaseUrl, schema, logger });
await pool.query(`CREATE TABLE "${schema}".orders (id text PRIMARY KEY, paid bigint NOT NULL DEFAULT 0)`);
say(`1. schema "${schema}" migrated (outbox, processed_messages, leases)`);

const kafka = new Kafka({ clientId: 'outbox-demo', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
await admin.connect();
await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
await admin.disconnect();

// The application's side: change the order and enqueue its event in ONE transaction.
const expected = new Map<string, number>();
for (let p = 1; p <= PAYMENTS; p++) {
  for (let n = 1; n <= ORDERS; n++) {
    const order = `order-${n}`;
    const amount = n * 10 + p;
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO "${schema}".orders (id, paid) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET paid = orders.paid + $2`, [order, amount]);
      await enqueue(client, { topic, key: order, payload: { type: 'payment_received', amount } }, { schema });
      await client.query('COMMIT');
      expected.set(order, (expected.get(order) ?? 0) + amount);
    } finally {
      client.release();
    }
  }
}
const client = await pool.connect();
await client.query('BEGIN');
await enqueue(client, { topic, key: 'order-1', payload: { type: 'payment_received', amount: 'twelve' } }, { schema });
await client.query('COMMIT');
client.release();
const total = ORDERS * PAYMENTS + 1;
say(`2. ${total} events enqueued with their order changes (${ORDERS} orders x ${PAYMENTS} payments, and one malformed amount)`);

const relay = createRelay({ databaseUrl, kafkaBrokers: brokers, schema, logger });
await relay.start();
say('3. relay running; the events as Kafka has them (partition, key, outbox id, value):');
const reader = kafka.consumer({ groupId: `outbox-demo-reader-${run}`, maxWaitTimeInMs: 100 });
await reader.connect();
await reader.subscribe({ topic, fromBeginning: true });
let seen = 0;
await new Promise<void>((resolve) => {
  void reader.run({
    eachMessage: async ({ partition, message }) => {
      if (++seen <= total) {
        say(`   p${partition}  ${message.key?.toString().padEnd(8)} #${message.headers?.[HEADERS.outboxId]?.toString().padEnd(3)} ${message.value?.toString()}`);
      }
      if (seen === total) resolve();
    },
  });
});
await reader.disconnect();

const consumerEnv = {
  DATABASE_URL: databaseUrl,
  KAFKA_BROKERS: brokers.join(','),
  OUTBOX_SCHEMA: schema,
  CONSUMER_TOPIC: topic,
  CONSUMER_GROUP: `demo-balances-${run}`,
  METRICS_ADDRESS: '127.0.0.1:0',
};
async function runConsumer(stopAfter: number): Promise<Record<string, number>> {
  const consumer = spawnTs('examples/consumer.ts', [], { ...consumerEnv, STOP_AFTER: String(stopAfter) });
  const code = await consumer.exited;
  const last = consumer.output().trim().split('\n').filter((l) => l.includes('example consumer stopped')).pop();
  if (code !== 0 || !last) throw new Error(`example consumer failed (${code}):\n${consumer.output()}`);
  return JSON.parse(last) as Record<string, number>;
}
async function balances(): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ entity: string; balance: string }>(`SELECT entity, balance FROM "${schema}".example_balances ORDER BY entity`);
  return new Map(rows.map((r) => [r.entity, Number(r.balance)]));
}

const first = await runConsumer(total);
say(`4. example consumer (examples/consumer.ts): processed ${first.processed}, duplicates ${first.duplicates}, dead-lettered ${first.deadLettered} (the malformed amount, to ${topic}.dead-letter)`);
const after = await balances();
const right = [...expected].every(([order, sum]) => after.get(order) === sum);
say(`   balances: ${[...after].map(([k, v]) => `${k}=${v}`).join(' ')}  (all equal to the payments: ${right})`);

// At least once on the wire: make the relay publish 5 events again, as after a crash
// between Kafka's ack and the commit.
await pool.query(`UPDATE "${schema}".outbox SET sent_at = NULL WHERE id IN (SELECT id FROM "${schema}".outbox ORDER BY id LIMIT 5)`);
const second = await runConsumer(5);
const again = await balances();
const unchanged = [...after].every(([k, v]) => again.get(k) === v);
say(`5. 5 events published again: the consumer skipped ${second.duplicates} duplicates; balances unchanged: ${unchanged}`);

await relay.stop();
if (!process.env.OUTBOX_SCHEMA) await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
await pool.end();
say(right && unchanged ? 'demo finished: every event published in order per key, each effect applied exactly once' : 'demo FAILED');
process.exit(right && unchanged ? 0 : 1);
