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
  /**
   * The key's bytes on the wire when a key encoding made them (./encodingStep.ts); the
   * partition is still the entity key's, so a key schema's new version moves no entity.
   */
  keyBytes?: Buffer;
  /** JSON text, bytes, or null for a tombstone. */
  value: Buffer | string | null;
  headers: Record<string, string>;
  /**
   * The Kafka message timestamp: created_at in ms since the epoch; undefined when no Kafka
   * timestamp can hold it (see {@link kafkaTimestampMs}): the client then stamps the
   * message with the time it sends it, and the header {@link CREATED_AT_HEADER} keeps
   * the original.
   */
  timestampMs?: number;
}

/**
 * The header that carries a row's created_at when no Kafka timestamp can hold it (before
 * 1970, past year 275760, `infinity`, `-infinity`), as Postgres prints it in UTC
 * (`1969-07-20 20:17:40.5+00`, `0044-03-15 12:00:00+00 BC`, `infinity`).
 */
export const CREATED_AT_HEADER = 'outbox-created-at';

/**
 * A row's created_at as a Kafka timestamp (ms since the epoch), or undefined when none
 * can hold it: Kafka timestamps are non-negative milliseconds (Java producers refuse
 * negative ones); Postgres' `infinity` and `-infinity` arrive as numbers and years past
 * JavaScript's range as an Invalid Date.
 */
export function kafkaTimestampMs(createdAt: unknown): number | undefined {
  if (!(createdAt instanceof Date)) return undefined;
  const ms = createdAt.getTime();
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

/** Postgres' text of a timestamptz in UTC, from its text as a UTC timestamp (claim.ts: created_at_text). */
function utcText(timestamp: string): string {
  if (timestamp === 'infinity' || timestamp === '-infinity') return timestamp;
  return timestamp.endsWith(' BC') ? `${timestamp.slice(0, -3)}+00 BC` : `${timestamp}+00`;
}

/** A date of years 1-9999 or beyond as Postgres prints it in UTC (to the millisecond: all a Date holds). */
function utcTextOfDate(date: Date): string {
  const two = (n: number): string => String(n).padStart(2, '0');
  const ms = date.getUTCMilliseconds();
  const fraction = ms === 0 ? '' : `.${String(ms).padStart(3, '0').replace(/0+$/, '')}`;
  const day = `${String(date.getUTCFullYear()).padStart(4, '0')}-${two(date.getUTCMonth() + 1)}-${two(date.getUTCDate())}`;
  return `${day} ${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:${two(date.getUTCSeconds())}${fraction}+00`;
}

/**
 * The message of a row whose created_at Kafka refused as a timestamp (INVALID_TIMESTAMP:
 * outside the topic's message.timestamp.before.max.ms / after.max.ms), to send again
 * stamped at send time with the original in {@link CREATED_AT_HEADER}. Changed in place,
 * so that it stays the message its publish span knows.
 */
export function stampAtSend(message: RelayMessage): void {
  if (message.timestampMs === undefined) return;
  message.headers[CREATED_AT_HEADER] = utcTextOfDate(new Date(message.timestampMs));
  delete message.timestampMs;
}

/** The created_at header's value of a row whose created_at no Kafka timestamp can hold. */
function createdAtText(row: ClaimedRow): string {
  if (typeof row.created_at_text === 'string') return utcText(row.created_at_text);
  // Not from the claim (a row built elsewhere): what the value itself still says.
  const value = row.created_at as unknown;
  if (value === Infinity) return 'infinity';
  if (value === -Infinity) return '-infinity';
  if (value instanceof Date && Number.isFinite(value.getTime())) return value.toISOString();
  throw new TypeError(`created_at is ${String(value)}, and the claim did not give its text`);
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
 * @throws TypeError when the row cannot be a message (see {@link headersProblem}); the
 *   caller dead-letters that row alone.
 */
export function toMessage(row: ClaimedRow): RelayMessage {
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
  const message: RelayMessage = { id: row.id, message_id: row.message_id, topic: row.topic, key: row.key, value, headers };
  const timestampMs = row.created_at_text == null ? kafkaTimestampMs(row.created_at) : undefined;
  if (timestampMs !== undefined) message.timestampMs = timestampMs;
  else headers[CREATED_AT_HEADER] = createdAtText(row);
  return message;
}
