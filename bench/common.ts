/** The servers the benchmarks run against, and the workload they put on them. */
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { Kafka, Partitioners, logLevel } from 'kafkajs';
import { HEADERS } from '../src/shared/kafka.js';
import { migrate } from '../src/commands/migrate.js';
import { until } from './util.js';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

// The workload: keys, batch and partitions as the relay is deployed, ~200-byte JSON values.
export const KEYS = 10_000;
export const BATCH = 500; // the relay's default batch size
export const PARTITIONS = 6;
export const PAYLOAD = JSON.stringify({ i: 0, pad: 'x'.repeat(150), type: 'order_updated' });

export function brokers(): string[] {
  const list = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (list.length === 0) throw new Error('KAFKA_BROKERS is not set: run through scripts/with-kafka.sh (npm run bench does)');
  return list;
}

export function kafka(): Kafka {
  return new Kafka({ clientId: 'bench', brokers: brokers(), logLevel: logLevel.NOTHING });
}

export function name(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6)}`;
}

/** A migrated schema of its own, dropped by the returned function. */
export async function benchSchema(pool: pg.Pool, prefix: string): Promise<{ schema: string; drop: () => Promise<void> }> {
  const schema = name(prefix);
  await migrate({ databaseUrl: DATABASE_URL, schema });
  return { schema, drop: async () => void (await pool.query(`DROP SCHEMA "${schema}" CASCADE`)) };
}

/** The table the benchmark consumers' handlers write their one-row effect into. */
export async function createEffectsTable(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, entity text NOT NULL, amount integer NOT NULL)`);
}

export async function createTopic(partitions: number): Promise<string> {
  const topic = name('bench');
  const admin = kafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: false });
    // kafkajs' own wait retries LEADER_NOT_AVAILABLE only: on a 3-node cluster a broker that
    // does not know the new topic yet answers UNKNOWN_TOPIC_OR_PARTITION, and it threw.
    await until(
      `leaders for the partitions of ${topic}`,
      async () => {
        const { topics } = await admin.fetchTopicMetadata({ topics: [topic] }).catch(() => ({ topics: [] as Array<{ partitions: Array<{ leader: number }> }> }));
        const parts = topics[0]?.partitions ?? [];
        return parts.length === partitions && parts.every((p) => p.leader >= 0);
      },
      30_000,
      50,
    );
  } finally {
    await admin.disconnect();
  }
  return topic;
}

/** `rows` outbox rows of ~200-byte JSON payloads over `keys` keys, committed at once. */
export async function fillBacklog(pool: pg.Pool, schema: string, topic: string, rows: number, keys: number, vacuum = true): Promise<void> {
  for (let start = 0; start < rows; start += 50_000) {
    await pool.query(
      `INSERT INTO "${schema}".outbox (topic, key, payload)
       SELECT $1, 'key-' || (i % $2), jsonb_build_object('i', i, 'type', 'order_updated', 'pad', repeat('x', 150))
         FROM generate_series($3::int, $4::int) AS i`,
      [topic, keys, start, Math.min(rows, start + 50_000) - 1],
    );
  }
  if (vacuum) await pool.query(`VACUUM ANALYZE "${schema}".outbox`);
}

/**
 * `total` JSON messages `{amount: 1, seq}` over 1,000 entity keys, as the relay would
 * publish them (message-id and content-type headers), for the consumer benchmarks.
 */
export async function produceAmountMessages(client: Kafka, topic: string, total: number): Promise<void> {
  const producer = client.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    for (let sent = 0; sent < total; sent += 1_000) {
      const n = Math.min(1_000, total - sent);
      await producer.send({
        topic,
        acks: -1,
        messages: Array.from({ length: n }, (_, i) => ({
          key: `entity-${(sent + i) % 1_000}`,
          value: JSON.stringify({ amount: 1, seq: sent + i }),
          headers: { [HEADERS.messageId]: randomUUID(), [HEADERS.contentType]: 'application/json' },
        })),
      });
    }
  } finally {
    await producer.disconnect();
  }
}
