import { Kafka, Partitioners, CompressionTypes, type KafkaConfig, type Message, type Producer } from 'kafkajs';
import { kafkaLogCreator, kafkaLogLevel, type Logger } from './logger.js';
import type { ClaimedRow } from '../relay/sql/claim.js';

/** Header names the relay sets on every message. */
export const HEADERS = {
  /** Stable event id (uuid): consumers deduplicate on it. */
  messageId: 'message-id',
  /** The outbox row id: a key's events carry increasing values. */
  outboxId: 'outbox-id',
  /** `application/json` for JSON payloads; absent for binary ones and tombstones. */
  contentType: 'content-type',
} as const;

export interface KafkaClientOptions {
  brokers: string[];
  clientId: string;
  logger: Logger;
  /** TLS (see src/kafkaSecurity.ts). */
  ssl?: KafkaConfig['ssl'];
  /** SASL (see src/kafkaSecurity.ts). */
  sasl?: KafkaConfig['sasl'];
}

/** A kafkajs client whose logs go through pino and whose retries are bounded. */
export function createKafka(options: KafkaClientOptions): Kafka {
  return new Kafka({
    clientId: options.clientId,
    brokers: options.brokers,
    connectionTimeout: 3_000,
    requestTimeout: 30_000,
    logLevel: kafkaLogLevel(options.logger.level),
    logCreator: kafkaLogCreator(options.logger),
    // kafkajs retries inside each send; the relay retries whole batches with its own
    // backoff on top, so keep this short and let the relay's backoff do the waiting.
    retry: { retries: 3, initialRetryTime: 200, maxRetryTime: 2_000 },
    ...(options.ssl !== undefined ? { ssl: options.ssl } : {}),
    ...(options.sasl ? { sasl: options.sasl } : {}),
  });
}

/**
 * The relay's producer. acks=all on every send; the Java-compatible murmur2 partitioner
 * (DefaultPartitioner) so that Java producers and consumers agree on a key's partition.
 *
 * Not idempotent (kafkajs marks that experimental) and maxInFlightRequests left open:
 * one key is never in two sends at once (each key belongs to one worker, whose sends are
 * sequential), so a retried request cannot overtake a later one of the same key.
 */
export function createProducer(kafka: Kafka): Producer {
  return kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: true,
  });
}

export const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
} as const;

/** One outbox row as the Kafka message the relay publishes. */
export function toKafkaMessage(row: ClaimedRow): Message {
  const headers: Record<string, string> = {};
  if (row.headers) {
    for (const [name, value] of Object.entries(row.headers)) {
      if (value !== null && value !== undefined) headers[name] = typeof value === 'string' ? value : JSON.stringify(value);
    }
  }
  let value: Buffer | string | null = null;
  if (row.payload !== null) {
    value = row.payload;
    headers[HEADERS.contentType] = 'application/json';
  } else if (row.payload_bytes !== null) {
    value = row.payload_bytes;
  }
  headers[HEADERS.messageId] = row.message_id;
  headers[HEADERS.outboxId] = String(row.id);
  return {
    key: row.key,
    value,
    headers,
    timestamp: String(row.created_at.getTime()),
  };
}

/** Rows in claim order, grouped by topic; each topic's messages keep that order. */
export function groupByTopic(rows: readonly ClaimedRow[]): Array<{ topic: string; messages: Message[] }> {
  const byTopic = new Map<string, Message[]>();
  for (const row of rows) {
    let list = byTopic.get(row.topic);
    if (!list) byTopic.set(row.topic, (list = []));
    list.push(toKafkaMessage(row));
  }
  return [...byTopic].map(([topic, messages]) => ({ topic, messages }));
}
