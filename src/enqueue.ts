import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { quoteSchema } from './shared/identifiers.js';
import { OutboxError } from './shared/errors.js';
import { activeContextHeaders, withContextHeaders } from './shared/tracing.js';

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
  /**
   * Producer-side deduplication: a stable key of this event (e.g. `order-42:paid:v3`,
   * never a timestamp or a random value). While a row with the same dedup key is in the
   * outbox, enqueueing it again adds nothing and reports a duplicate. The window is the
   * row's life in the table: once cleanup deletes it (or the relay deletes it on publish,
   * or it becomes a dead letter) the key can be used again; consumers still deduplicate
   * by message id.
   */
  dedupKey?: string;
}

/** What became of one message passed to {@link enqueue}, in the order they were passed. */
export type EnqueueResult =
  | {
      /** A new outbox row was inserted. */
      inserted: true;
      id: number;
      messageId: string;
      dedupKey: string | null;
    }
  | {
      /**
       * Not inserted: a row with the same dedup key is already in the outbox (committed,
       * or inserted earlier in this transaction or in this same call).
       */
      inserted: false;
      /** The existing row's id and message id, or null when it is no longer visible. */
      id: number | null;
      messageId: string | null;
      dedupKey: string;
    };

/** Where `enqueue` writes: the schema of the outbox table. */
export interface EnqueueOptions {
  /** Schema of the outbox table (default `public`). */
  schema?: string;
}

/**
 * Insert events into the outbox on `client`, inside the caller's transaction, so that
 * they are published if and only if that transaction commits.
 *
 * Messages with a `dedupKey` use `ON CONFLICT (dedup_key) DO NOTHING`: if a row with that
 * key is in the outbox already, nothing is inserted for it (when another transaction has
 * inserted the key and not committed yet, this waits for it, as a unique index does).
 *
 * @returns one entry per message, in the order given: `inserted: true` with the new row's
 *   id and message id, or `inserted: false` for a duplicate dedup key, with the existing
 *   row's id and message id when it can be seen
 */
export async function enqueue(
  client: pg.ClientBase,
  messages: OutboxMessage | OutboxMessage[],
  options: EnqueueOptions = {},
): Promise<EnqueueResult[]> {
  const list = Array.isArray(messages) ? messages : [messages];
  if (list.length === 0) return [];
  const schema = quoteSchema(options.schema);
  const topics: string[] = [];
  const keys: string[] = [];
  const payloads: Array<string | null> = [];
  const bytes: Array<Buffer | null> = [];
  const headers: Array<string | null> = [];
  const dedupKeys: Array<string | null> = [];
  // The message id is chosen here, not by the column default, so that each returned row
  // maps back to its message even when duplicates leave gaps.
  const messageIds: string[] = [];
  const firstWithKey = new Map<string, number>();
  const sameCallDuplicate: boolean[] = [];
  // The active OpenTelemetry context, if the API is installed and a propagator registered;
  // added to each row's headers without overriding the caller's.
  const traceHeaders = await activeContextHeaders();
  for (const [i, m] of list.entries()) {
    if (typeof m.topic !== 'string' || m.topic === '') throw invalid(i, 'topic must be a non-empty string');
    if (typeof m.key !== 'string') throw invalid(i, 'key must be a string');
    if (m.headers !== undefined && (typeof m.headers !== 'object' || m.headers === null || Object.values(m.headers).some((v) => typeof v !== 'string'))) {
      throw invalid(i, 'headers must be an object of string values');
    }
    if (m.dedupKey !== undefined && (typeof m.dedupKey !== 'string' || m.dedupKey === '')) {
      throw invalid(i, 'dedupKey must be a non-empty string');
    }
    const dedupKey = m.dedupKey ?? null;
    sameCallDuplicate.push(dedupKey !== null && firstWithKey.has(dedupKey));
    if (dedupKey !== null && !firstWithKey.has(dedupKey)) firstWithKey.set(dedupKey, i);
    dedupKeys.push(dedupKey);
    messageIds.push(randomUUID());
    topics.push(m.topic);
    keys.push(m.key);
    if (Buffer.isBuffer(m.payload)) {
      payloads.push(null);
      bytes.push(m.payload);
    } else {
      payloads.push(m.payload === undefined || m.payload === null ? null : JSON.stringify(m.payload));
      bytes.push(null);
    }
    const rowHeaders = withContextHeaders(m.headers, traceHeaders);
    headers.push(rowHeaders ? JSON.stringify(rowHeaders) : null);
  }
  // One statement for the whole list; unnest keeps the rows in list order, and each row
  // takes its id in that order. A repeat of a dedup key within the list is left out here
  // (the first one wins), so the statement never meets its own rows.
  const keep = list.map((_, i) => !sameCallDuplicate[i]);
  const pick = <T>(a: T[]): T[] => a.filter((_, i) => keep[i]);
  // Without a dedup key nothing can conflict: no ON CONFLICT, which a partitioned outbox
  // (docs/partitioning.md) has no unique dedup index for.
  const onConflict = firstWithKey.size > 0 ? 'ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING' : '';
  const { rows } = await client
    .query<{ id: number; message_id: string }>(
      `INSERT INTO ${schema}.outbox (message_id, topic, key, payload, payload_bytes, headers, dedup_key)
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::bytea[], $6::jsonb[], $7::text[])
         ${onConflict}
     RETURNING id, message_id`,
      [pick(messageIds), pick(topics), pick(keys), pick(payloads), pick(bytes), pick(headers), pick(dedupKeys)],
    )
    .catch((error: unknown) => {
      if ((error as { code?: string }).code === '42P10') {
        throw new OutboxError(
          `enqueue: dedupKey needs the outbox's unique dedup index, which a partitioned outbox cannot have (docs/partitioning.md): enqueue without dedupKey there`,
          { retriable: false, cause: error },
        );
      }
      throw error;
    });
  const inserted = new Map(rows.map((r) => [r.message_id, Number(r.id)]));
  // Which row holds each dedup key: the one just inserted, or (for duplicates) one that
  // was there before, looked up in one query and only when there are any.
  const existing = new Map<string, { id: number; messageId: string }>();
  for (const [k, i] of firstWithKey) {
    const id = inserted.get(messageIds[i]!);
    if (id !== undefined) existing.set(k, { id, messageId: messageIds[i]! });
  }
  const missingKeys = [...firstWithKey.keys()].filter((k) => !existing.has(k));
  if (missingKeys.length > 0) {
    const found = await client.query<{ id: number; message_id: string; dedup_key: string }>(
      `SELECT id, message_id, dedup_key FROM ${schema}.outbox WHERE dedup_key = ANY($1::text[])`,
      [missingKeys],
    );
    for (const r of found.rows) existing.set(r.dedup_key, { id: Number(r.id), messageId: r.message_id });
  }
  return list.map((_, i): EnqueueResult => {
    const id = sameCallDuplicate[i] ? undefined : inserted.get(messageIds[i]!);
    if (id !== undefined) return { inserted: true, id, messageId: messageIds[i]!, dedupKey: dedupKeys[i]! };
    const dedupKey = dedupKeys[i]!;
    // Rows without a dedup key are always inserted; a missing one here would be a bug.
    if (dedupKey === null) throw new OutboxError('enqueue: a row without dedup key was not inserted', { retriable: false, context: { index: i } });
    const row = existing.get(dedupKey);
    return { inserted: false, id: row?.id ?? null, messageId: row?.messageId ?? null, dedupKey };
  });
}

function invalid(index: number, problem: string): OutboxError {
  return new OutboxError(`enqueue: message ${index}: ${problem}`, { retriable: false, context: { index } });
}
