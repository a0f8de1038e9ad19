// A consumer service of the fault-injection suite, in its own process, on the consumer
// runtime (src/consumer/). Its handler's one effect is a row in the effects table, which
// has no unique constraint on the message id: a message applied twice shows as two rows.
//
// Environment: DATABASE_URL, KAFKA_BROKERS, OUTBOX_SCHEMA, GROUP_ID, TOPICS, CONSUMER_NAME,
// and FAULTS_DEDUP=off for the planted bug: no idempotency key for any message, and the
// runtime's own 'process-without-dedup' outcome for keyless messages, so redeliveries are
// applied again.
//
// Reports one JSON object a line on stdout; SIGTERM stops it softly (leaves the group).
// SIGUSR2 arms the worst-moment crash: the process SIGKILLs itself in the next 'committed'
// event, after a Postgres commit and before the Kafka offset commit of those messages, so
// they are delivered again (to be skipped by the dedup, or applied twice without it).
import { writeSync } from 'node:fs';
import { createConsumer } from '../../src/consumer/consumer.js';
import { HEADERS } from '../../src/shared/kafka.js';

const env = process.env;
const report = (event: Record<string, unknown>): void => {
  writeSync(1, JSON.stringify({ t: Date.now(), ...event }) + '\n');
};

const schema = env.OUTBOX_SCHEMA as string;
const name = env.CONSUMER_NAME ?? `consumer-${process.pid}`;
const dedupOff = env.FAULTS_DEDUP === 'off';
const insert = `INSERT INTO "${schema}".effects (message_id, key, outbox_id, consumer) VALUES ($1, $2, $3, $4)`;

const consumer = createConsumer({
  databaseUrl: env.DATABASE_URL as string,
  kafkaBrokers: (env.KAFKA_BROKERS as string).split(','),
  clientId: `faults-${name}`,
  groupId: env.GROUP_ID as string,
  topics: (env.TOPICS as string).split(','),
  schema,
  batchesInFlight: Number(env.PARTITIONS_CONCURRENCY ?? 3),
  messagesPerTransaction: 50,
  sessionTimeoutMs: Number(env.SESSION_TIMEOUT_MS ?? 6_000),
  heartbeatIntervalMs: 500,
  rebalanceTimeoutMs: 10_000,
  maxWaitTimeMs: 100,
  retryMaxDelayMs: 2_000,
  shutdownTimeoutMs: 5_000,
  ...(dedupOff ? { idempotencyKey: () => undefined, onMissingKey: 'process-without-dedup' as const } : {}),
  handler: async (message, { client }) => {
    await client.query(insert, [message.messageId ?? null, message.key ?? '', Number(message.headers[HEADERS.outboxId]), name]);
  },
});

let processed = 0;
let killAtNextCommit = false;
process.on('SIGUSR2', () => {
  killAtNextCommit = true;
});
consumer.on('assigned', (a) => report({ event: 'assigned', partitions: a.partitions.map((p) => p.partition) }));
consumer.on('committed', (c) => {
  processed += c.processed;
  if (killAtNextCommit) {
    // Listeners run synchronously between the Postgres commit and the offset commit.
    report({ event: 'killing', after: 'db-commit', partition: c.partition, firstOffset: c.firstOffset, lastOffset: c.lastOffset });
    process.kill(process.pid, 'SIGKILL');
  }
});
consumer.on('error', (e) => report({ event: 'error', during: e.during, error: String((e.error as Error)?.message ?? e.error).slice(0, 300) }));

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  void consumer.stop().then((result) => {
    report({ event: 'stopped', ...result, stats: consumer.stats() });
    process.exit(0);
  });
});

const progress = setInterval(() => report({ event: 'progress', processed }), 5_000);
progress.unref();

try {
  await consumer.start();
} catch (error) {
  report({ event: 'start-failed', error: String((error as Error)?.message ?? error) });
  process.exit(1);
}
report({ event: 'started', pid: process.pid, dedup: !dedupOff });
