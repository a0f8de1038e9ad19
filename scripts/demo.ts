/**
 * The README's first command (`npm run demo`): the relay on real servers, end to end.
 *
 * Uses DATABASE_URL (default: this machine's Postgres, database `test`) and KAFKA_BROKERS
 * (scripts/with-kafka.sh starts a local broker when none is given). Migrates a schema of
 * its own, enqueues sample order events in the same transactions as the order changes,
 * runs the relay, and prints the events as a plain Kafka consumer receives them.
 */
import pg from 'pg';
import { Kafka, logLevel } from 'kafkajs';
import { createLogger, createRelay, enqueue, migrate, HEADERS } from '../src/index.js';

const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const schema = process.env.OUTBOX_SCHEMA ?? 'outbox_demo';
const topic = `demo.orders.${Date.now().toString(36)}`;
const ORDERS = 12;
const STEPS = ['created', 'paid', 'shipped'] as const;

if (brokers.length === 0) {
  console.error('demo: KAFKA_BROKERS is not set (run it as `npm run demo`, which starts a local broker)');
  process.exit(2);
}

const logger = createLogger((process.env.OUTBOX_LOG_LEVEL as 'info' | undefined) ?? 'warn');
const say = (line: string): void => void process.stdout.write(`${line}\n`);

const applied = await migrate({ databaseUrl, schema, logger });
say(`1. schema "${schema}" migrated (${applied.applied.length} new migrations)`);

const pool = new pg.Pool({ connectionString: databaseUrl });
await pool.query(`CREATE TABLE IF NOT EXISTS "${schema}".orders (id text PRIMARY KEY, status text NOT NULL)`);

const kafka = new Kafka({ clientId: 'outbox-demo', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
await admin.connect();
await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
await admin.disconnect();

// The application's side: change the order row and enqueue its event in ONE transaction.
for (const step of STEPS) {
  for (let n = 1; n <= ORDERS; n++) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO "${schema}".orders (id, status) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status`,
        [`order-${n}`, step],
      );
      await enqueue(client, { topic, key: `order-${n}`, payload: { type: `order_${step}`, orderId: `order-${n}` } }, { schema });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  }
}
const total = ORDERS * STEPS.length;
say(`2. ${total} events enqueued (${ORDERS} orders x ${STEPS.join(' -> ')}) on topic ${topic}`);

const relay = createRelay({ databaseUrl, kafkaBrokers: brokers, schema, logger });
await relay.start();
say('3. relay running; events as a Kafka consumer sees them (partition, key, outbox id, payload):');

const consumer = kafka.consumer({ groupId: `outbox-demo-${Date.now()}`, maxWaitTimeInMs: 100 });
await consumer.connect();
await consumer.subscribe({ topic, fromBeginning: true });
const seen = new Set<string>();
const lastStep = new Map<string, string>();
await new Promise<void>((resolve) => {
  void consumer.run({
    eachMessage: async ({ partition, message }) => {
      const id = message.headers?.[HEADERS.messageId]?.toString() ?? '';
      const payload = JSON.parse(message.value?.toString() ?? 'null') as { type: string };
      say(`   p${partition}  ${message.key?.toString().padEnd(9)} #${message.headers?.[HEADERS.outboxId]?.toString().padEnd(4)} ${JSON.stringify(payload)}`);
      lastStep.set(message.key?.toString() ?? '', payload.type);
      seen.add(id);
      if (seen.size === total) resolve();
    },
  });
});
await consumer.disconnect();
await relay.stop();
const inOrder = [...lastStep.values()].every((t) => t === 'order_shipped');
say(`4. all ${seen.size} events arrived; every order's last event is order_shipped: ${inOrder}`);
await pool.end();
process.exit(inOrder ? 0 : 1);
