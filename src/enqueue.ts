import type pg from 'pg';
import { quoteIdentifier } from './identifiers.js';
import { OutboxError } from './errors.js';

/** An event to enqueue. */
export interface OutboxMessage {
  /** Kafka topic to publish to. */
  topic: string;
  /** Entity key: all events of one key go to one partition, in enqueue order. */
  key: string;
  /**
   * The value: any JSON value (stored as jsonb), a Buffer (pre-encoded Avro, Protobuf,
   * published byte for byte), or null/undefined for a tombstone.
   */
  payload?: unknown;
  /** Extra Kafka headers, string to string (e.g. `traceparent`). */
  headers?: Record<string, string>;
}

export interface EnqueueOptions {
  /** Schema of the outbox table (default `public`). */
  schema?: string;
}

/**
 * Insert events into the outbox on `client`, inside the caller's transaction, so that
 * they are published if and only if that transaction commits.
 *
 * @returns the outbox ids and message ids of the new rows, in order
 */
export async function enqueue(
  client: pg.ClientBase,
  messages: OutboxMessage | OutboxMessage[],
  options: EnqueueOptions = {},
): Promise<Array<{ id: number; messageId: string }>> {
  const list = Array.isArray(messages) ? messages : [messages];
  if (list.length === 0) return [];
  const schema = quoteIdentifier(options.schema ?? 'public', 'schema');
  const topics: string[] = [];
  const keys: string[] = [];
  const payloads: Array<string | null> = [];
  const bytes: Array<Buffer | null> = [];
  const headers: Array<string | null> = [];
  for (const [i, m] of list.entries()) {
    if (typeof m.topic !== 'string' || m.topic === '') throw invalid(i, 'topic must be a non-empty string');
    if (typeof m.key !== 'string') throw invalid(i, 'key must be a string');
    if (m.headers !== undefined && (typeof m.headers !== 'object' || m.headers === null || Object.values(m.headers).some((v) => typeof v !== 'string'))) {
      throw invalid(i, 'headers must be an object of string values');
    }
    topics.push(m.topic);
    keys.push(m.key);
    if (Buffer.isBuffer(m.payload)) {
      payloads.push(null);
      bytes.push(m.payload);
    } else {
      payloads.push(m.payload === undefined || m.payload === null ? null : JSON.stringify(m.payload));
      bytes.push(null);
    }
    headers.push(m.headers ? JSON.stringify(m.headers) : null);
  }
  // One statement for the whole list; unnest keeps the rows in list order, and each row
  // takes its id in that order.
  const { rows } = await client.query<{ id: number; message_id: string }>(
    `INSERT INTO ${schema}.outbox (topic, key, payload, payload_bytes, headers)
     SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::bytea[], $5::jsonb[])
     RETURNING id, message_id`,
    [topics, keys, payloads, bytes, headers],
  );
  return rows.map((r) => ({ id: Number(r.id), messageId: r.message_id }));
}

function invalid(index: number, problem: string): OutboxError {
  return new OutboxError(`enqueue: message ${index}: ${problem}`, { retriable: false, context: { index } });
}
