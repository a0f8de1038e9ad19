// A small consumer service on the outbox-relay consumer runtime: each message adds its
// amount to an entity's balance and records the change, exactly once per message.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test KAFKA_BROKERS=127.0.0.1:19092 \
//   OUTBOX_SCHEMA=public CONSUMER_TOPIC=orders npx tsx examples/consumer.ts
//
// Environment:
//   DATABASE_URL     Postgres (required); run `outbox-relay migrate` on OUTBOX_SCHEMA first
//   KAFKA_BROKERS    comma-separated host:port (required)
//   OUTBOX_SCHEMA    schema of processed_messages and of the example's tables (default public)
//   CONSUMER_TOPIC   topic to consume (required)
//   CONSUMER_GROUP   consumer group (default example-consumer)
//   STOP_AFTER       stop after this many messages were handled (processed + duplicates
//                    + dead-lettered); default: run until SIGTERM or SIGINT
//   METRICS_ADDRESS  host:port of /metrics, /healthz and /readyz (default 127.0.0.1:9465),
//                    or off
//
// Messages are JSON, e.g. {"amount": 5}; the Kafka key is the entity. A value that is
// not JSON, or an amount that is not an integer, goes to <topic>.dead-letter.
import pg from 'pg';
import { Registry } from 'prom-client';
import {
  createConsumer,
  createLogger,
  instrumentConsumer,
  instrumentHandler,
  OutboxError,
  quoteIdentifier,
  startMetricsServer,
  type MetricsServer,
} from '../src/index.js';
import { parseMetricsAddress } from '../src/metrics/options.js';

const env = process.env;
for (const name of ['DATABASE_URL', 'KAFKA_BROKERS', 'CONSUMER_TOPIC']) {
  if (!env[name]) {
    process.stderr.write(`examples/consumer: ${name} is required\n`);
    process.exit(2);
  }
}
const schema = quoteIdentifier(env.OUTBOX_SCHEMA ?? 'public', 'OUTBOX_SCHEMA');
const stopAfter = env.STOP_AFTER ? Number(env.STOP_AFTER) : Infinity;
const logger = createLogger('info');
const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 5 });

// The effect table of the demo: one row per applied change, and a balance per entity.
await pool.query(`
  CREATE TABLE IF NOT EXISTS ${schema}.example_ledger (
    id bigserial PRIMARY KEY,
    entity text NOT NULL,
    amount bigint NOT NULL,
    message_id text,
    applied_at timestamptz NOT NULL DEFAULT now());
  CREATE TABLE IF NOT EXISTS ${schema}.example_balances (entity text PRIMARY KEY, balance bigint NOT NULL)`);

class InvalidAmount extends OutboxError {
  constructor(value: unknown) {
    super(`amount ${JSON.stringify(value)} is not an integer`, { retriable: false });
  }
}

const registry = new Registry();
const metricsAddress = parseMetricsAddress(env.METRICS_ADDRESS ?? '127.0.0.1:9465');
if ('problem' in metricsAddress) {
  process.stderr.write(`examples/consumer: METRICS_ADDRESS: ${metricsAddress.problem}\n`);
  process.exit(2);
}

const consumer = createConsumer<{ amount?: unknown }>({
  kafkaBrokers: (env.KAFKA_BROKERS as string).split(','),
  groupId: env.CONSUMER_GROUP ?? 'example-consumer',
  topics: env.CONSUMER_TOPIC as string,
  pool,
  schema: env.OUTBOX_SCHEMA ?? 'public',
  decode: 'json',
  logger,
  handler: instrumentHandler<{ amount?: unknown }>(async (message, { client }) => {
    const amount = message.value?.amount;
    if (!Number.isSafeInteger(amount)) throw new InvalidAmount(amount);
    const entity = message.key ?? '';
    await client.query(`INSERT INTO ${schema}.example_ledger (entity, amount, message_id) VALUES ($1, $2, $3)`, [entity, amount, message.messageId]);
    await client.query(
      `INSERT INTO ${schema}.example_balances (entity, balance) VALUES ($1, $2)
       ON CONFLICT (entity) DO UPDATE SET balance = example_balances.balance + EXCLUDED.balance`,
      [entity, amount],
    );
  }, registry),
});
const instrumentation = instrumentConsumer(consumer, { registry, logger });

let stopping: Promise<unknown> | undefined;
const stop = (why: string): void => {
  if (stopping) return;
  logger.info({ why }, 'stopping');
  stopping = consumer.stop().then(async ({ hard }) => {
    await metrics?.close();
    await instrumentation.close();
    await pool.end();
    logger.info({ hard, ...consumer.stats() }, 'example consumer stopped');
    logger.flush();
    process.exit(hard ? 3 : 0);
  });
};
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
const handled = (): number => {
  const s = consumer.stats();
  return s.processed + s.duplicates + s.deadLettered;
};
consumer.on('offsetCommitted', () => {
  if (handled() >= stopAfter) stop(`STOP_AFTER=${stopAfter} messages handled`);
});

await consumer.start();
let metrics: MetricsServer | undefined;
if (metricsAddress.value !== 'off') {
  metrics = await startMetricsServer({ host: metricsAddress.value.host, port: metricsAddress.value.port, registry, logger });
}
logger.info({ topic: env.CONSUMER_TOPIC, groupId: consumer.options.groupId }, 'example consumer running');
