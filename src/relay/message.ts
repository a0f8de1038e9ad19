import { HEADERS } from '../shared/kafka.js';
import type { ClaimedRow } from './sql/claim.js';

/**
 * One outbox row as the message the relay publishes, independent of the Kafka client:
 * what a producer adapter (./producer.ts) sends.
 */
export interface RelayMessage {
  /** The outbox row's id and message id (also in the headers), for logs and spans. */
  id: number;
  message_id: string;
  topic: string;
  /** The entity key; it decides the partition (./partitioner.ts). */
  key: string;
  /** JSON text, bytes, or null for a tombstone. */
  value: Buffer | string | null;
  headers: Record<string, string>;
  /** The Kafka message timestamp: created_at in ms since the epoch, a non-negative integer. */
  timestampMs: number;
}

/**
 * Why a row's created_at cannot be a Kafka timestamp, or undefined when it can.
 * Postgres' `infinity` and `-infinity` arrive as numbers, years beyond JavaScript's range
 * as an Invalid Date; Kafka timestamps are non-negative milliseconds (Java producers
 * refuse negative ones), so dates before 1970 are refused too.
 */
export function timestampProblem(createdAt: unknown): string | undefined {
  if (!(createdAt instanceof Date)) return `created_at is ${String(createdAt)}, not a date a Kafka timestamp can hold`;
  const ms = createdAt.getTime();
  if (!Number.isFinite(ms)) return 'created_at is outside the range of dates the relay can publish (years beyond 275760)';
  if (ms < 0) return `created_at ${createdAt.toISOString()} is before 1970: Kafka timestamps cannot be negative`;
  return undefined;
}

/** Why a row's headers cannot be Kafka headers, or undefined when they can. */
export function headersProblem(headers: unknown): string | undefined {
  if (headers === null || headers === undefined) return undefined;
  if (typeof headers !== 'object' || Array.isArray(headers)) {
    return `headers must be a JSON object of strings, not ${Array.isArray(headers) ? 'an array' : `a ${typeof headers}`}`;
  }
  return undefined;
}

/**
 * One outbox row as the message the relay publishes.
 *
 * @throws TypeError when the row cannot be a message (see {@link timestampProblem} and
 *   {@link headersProblem}); the caller dead-letters that row alone.
 */
export function toMessage(row: ClaimedRow): RelayMessage {
  const timestamp = timestampProblem(row.created_at as unknown);
  if (timestamp) throw new TypeError(timestamp);
  const shape = headersProblem(row.headers as unknown);
  if (shape) throw new TypeError(shape);
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
  if (typeof row.key !== 'string' || typeof row.topic !== 'string') throw new TypeError('topic and key must be text');
  return { id: row.id, message_id: row.message_id, topic: row.topic, key: row.key, value, headers, timestampMs: row.created_at.getTime() };
}
