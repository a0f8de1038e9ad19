import { Kafka, type KafkaConfig } from 'kafkajs';
import './kafkajsIdleFix.js';
import { kafkaLogCreator, kafkaLogLevel, type Logger } from './logger.js';

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
