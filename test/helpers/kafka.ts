import '../../src/shared/kafkajsIdleFix.js';
import { Kafka, logLevel, type KafkaMessage } from 'kafkajs';
import { uniqueName } from './db.js';
import { waitFor } from './wait.js';

/** The broker the tests use: KAFKA_BROKERS, set by scripts/with-kafka.sh or the caller. */
export function testBrokers(): string[] {
  const value = process.env.KAFKA_BROKERS;
  if (!value) throw new Error('KAFKA_BROKERS is not set: run the tests with `npm test` (it starts a broker)');
  return value.split(',');
}

export function testKafka(brokers = testBrokers()): Kafka {
  return new Kafka({ clientId: uniqueName('test'), brokers, logLevel: logLevel.NOTHING });
}

/** Create a topic of its own for one test. */
export async function createTopic(partitions: number, brokers = testBrokers(), prefix = 'topic'): Promise<string> {
  const topic = uniqueName(prefix);
  const admin = testKafka(brokers).admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }], waitForLeaders: false });
    // kafkajs' own wait for leaders retries LEADER_NOT_AVAILABLE only: a broker that does
    // not know the new topic yet answers UNKNOWN_TOPIC_OR_PARTITION, which it threw (a
    // loaded CI run). Wait here for every partition to have a leader.
    await waitFor(`leaders for the partitions of ${topic}`, async () => {
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
      const parts = topics[0]?.partitions ?? [];
      return parts.length === partitions && parts.every((p) => p.leader >= 0);
    }, { timeoutMs: 30_000, intervalMs: 50 });
  } finally {
    await admin.disconnect();
  }
  return topic;
}

/** How many records the topic's log holds: the sum of its partitions' high watermarks. */
export async function topicRecordCount(topic: string, brokers = testBrokers()): Promise<number> {
  const admin = testKafka(brokers).admin();
  await admin.connect();
  try {
    return (await admin.fetchTopicOffsets(topic)).reduce((sum, p) => sum + Number(p.high), 0);
  } finally {
    await admin.disconnect();
  }
}

export interface ReadMessage {
  partition: number;
  offset: string;
  key: string | null;
  /** The key's bytes as they came (an encoded key is not UTF-8 text). */
  keyBytes: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
  timestamp: string;
}

function decodeHeaders(message: KafkaMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    if (value !== undefined) out[name] = Array.isArray(value) ? String(value[0]) : String(value);
  }
  return out;
}

/**
 * Read a topic from the beginning with a plain kafkajs consumer until `done(messages)`
 * says enough arrived, then return everything read, per partition in offset order.
 */
export async function readTopic(
  topic: string,
  done: (messages: ReadMessage[]) => boolean,
  { brokers = testBrokers(), timeoutMs = 120_000 }: { brokers?: string[]; timeoutMs?: number } = {},
): Promise<ReadMessage[]> {
  const consumer = testKafka(brokers).consumer({ groupId: uniqueName('reader'), maxWaitTimeInMs: 100 });
  const messages: ReadMessage[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        messages.push({
          partition,
          offset: message.offset,
          key: message.key?.toString() ?? null,
          keyBytes: message.key,
          value: message.value,
          headers: decodeHeaders(message),
          timestamp: message.timestamp,
        });
      },
    });
    await waitFor(`messages on ${topic}`, () => done(messages), { timeoutMs });
  } finally {
    await consumer.disconnect();
  }
  return messages;
}

/**
 * Read a topic from the beginning to the high watermarks it has now, with
 * isolation.level=read_committed (kafkajs' default): what a transactional reader gets.
 * A partition is read to its end when the consumer's position passed its last offset,
 * control records (transaction markers, never delivered as messages) included: kafkajs
 * reports that position for every fetched batch (END_BATCH_PROCESS), also for a batch of
 * markers only.
 */
export async function readCommittedToEnd(topic: string, { brokers = testBrokers(), timeoutMs = 120_000 }: { brokers?: string[]; timeoutMs?: number } = {}): Promise<ReadMessage[]> {
  const kafka = testKafka(brokers);
  const admin = kafka.admin();
  await admin.connect();
  const ends = new Map<number, number>();
  try {
    for (const p of await admin.fetchTopicOffsets(topic)) if (Number(p.high) > 0) ends.set(p.partition, Number(p.high));
  } finally {
    await admin.disconnect();
  }
  const messages: ReadMessage[] = [];
  if (ends.size === 0) return messages;
  const consumer = kafka.consumer({ groupId: uniqueName('committed-reader'), maxWaitTimeInMs: 100 });
  const remaining = new Set(ends.keys());
  consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
    if (Number(payload.lastOffset) >= ends.get(payload.partition)! - 1) remaining.delete(payload.partition);
  });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        if (Number(message.offset) >= ends.get(partition)!) return;
        messages.push({ partition, offset: message.offset, key: message.key?.toString() ?? null, keyBytes: message.key, value: message.value, headers: decodeHeaders(message), timestamp: message.timestamp });
      },
    });
    await waitFor(`${topic} read to its end`, () => remaining.size === 0, { timeoutMs });
  } finally {
    await consumer.disconnect();
  }
  return messages;
}
