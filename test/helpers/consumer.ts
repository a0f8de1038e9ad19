import { randomUUID } from 'node:crypto';
import { after } from 'node:test';
import { Partitioners, type IHeaders } from 'kafkajs';
import type pg from 'pg';
import { HEADERS } from '../../src/shared/kafka.js';
import type { BatchContext, ConsumedMessage, ConsumerEvents, HandlerContext } from '../../src/consumer/types.js';
import { createConsumer, type Consumer } from '../../src/consumer/consumer.js';
import type { ConsumerOptions } from '../../src/consumer/options.js';
import { testKafka } from './kafka.js';
import { uniqueName } from './db.js';

/** A message as the relay would publish it. */
export interface TestEvent {
  key: string;
  /** JSON-encoded with content-type application/json, unless `raw` is given. */
  value?: unknown;
  /** Bytes sent as they are, without content-type (overrides value). */
  raw?: Buffer | string;
  /** Default: a fresh uuid. null: no message-id header. */
  messageId?: string | null;
  headers?: Record<string, string>;
  partition?: number;
}

/** Publish events with the relay's headers; returns them with their message ids filled in. */
export async function produce(topic: string, events: TestEvent[]): Promise<Array<TestEvent & { messageId: string | null }>> {
  // Idempotent: a send kafkajs retries (a slow answer on a loaded box) is written once,
  // so a test's count of duplicates is the duplicates it published, not the retries'
  // (a CI run had 168 records for 120 sent).
  const producer = testKafka().producer({ createPartitioner: Partitioners.DefaultPartitioner, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const out = events.map((e) => ({ ...e, messageId: e.messageId === undefined ? randomUUID() : e.messageId }));
  try {
    await producer.send({
      topic,
      acks: -1,
      messages: out.map((e) => {
        const headers: IHeaders = { ...(e.headers ?? {}) };
        if (e.messageId !== null) headers[HEADERS.messageId] = e.messageId;
        let value: Buffer | string | null = null;
        if (e.raw !== undefined) value = e.raw;
        else if (e.value !== undefined) {
          value = JSON.stringify(e.value);
          headers[HEADERS.contentType] = 'application/json';
        }
        return { key: e.key, value, headers, partition: e.partition };
      }),
    });
  } finally {
    await producer.disconnect();
  }
  return out;
}

/**
 * The tables a test handler's effects are visible in. `effects` has no unique constraint
 * on purpose: a message handled twice shows up as two rows.
 */
export async function createEffectTables(pool: pg.Pool, schema: string): Promise<void> {
  await pool.query(`
    CREATE TABLE "${schema}".effects (
      seq bigserial PRIMARY KEY,
      message_id text,
      entity text NOT NULL,
      amount integer NOT NULL,
      topic text NOT NULL,
      kafka_partition integer NOT NULL,
      kafka_offset bigint NOT NULL
    );
    CREATE TABLE "${schema}".balances (entity text PRIMARY KEY, total bigint NOT NULL)`);
}

/** The handler's one effect: an effects row and a balance update. */
export async function applyEffect(schema: string, message: ConsumedMessage<unknown>, { client }: HandlerContext): Promise<void> {
  const value = message.value as { amount?: number } | null;
  const amount = value?.amount ?? 1;
  await client.query(
    `INSERT INTO "${schema}".effects (message_id, entity, amount, topic, kafka_partition, kafka_offset) VALUES ($1, $2, $3, $4, $5, $6)`,
    [message.messageId ?? null, message.key ?? '', amount, message.topic, message.partition, message.offset],
  );
  await client.query(
    `INSERT INTO "${schema}".balances (entity, total) VALUES ($1, $2)
     ON CONFLICT (entity) DO UPDATE SET total = balances.total + EXCLUDED.total`,
    [message.key ?? '', amount],
  );
}

/**
 * applyEffect for a whole batch, set-based: one multi-row INSERT into effects (unnest of
 * the columns) and one balance upsert per entity (summed first: one statement may not
 * update a row twice), two statements whatever the batch's size.
 */
export async function applyBatchEffect(schema: string, messages: ReadonlyArray<ConsumedMessage<unknown>>, { client }: Pick<BatchContext, 'client'>): Promise<void> {
  const amounts = messages.map((m) => (m.value as { amount?: number } | null)?.amount ?? 1);
  await client.query(
    `INSERT INTO "${schema}".effects (message_id, entity, amount, topic, kafka_partition, kafka_offset)
     SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::int[], $6::bigint[])`,
    [messages.map((m) => m.messageId ?? null), messages.map((m) => m.key ?? ''), amounts, messages.map((m) => m.topic), messages.map((m) => m.partition), messages.map((m) => m.offset)],
  );
  await client.query(
    `INSERT INTO "${schema}".balances (entity, total)
     SELECT entity, sum(amount) FROM unnest($1::text[], $2::int[]) AS u(entity, amount) GROUP BY entity
     ON CONFLICT (entity) DO UPDATE SET total = balances.total + EXCLUDED.total`,
    [messages.map((m) => m.key ?? ''), amounts],
  );
}

/** message_id -> number of effect rows (of one topic's messages when `topic` is given). */
export async function effectCounts(pool: pg.Pool, schema: string, topic?: string): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ message_id: string; n: number }>(
    `SELECT message_id, count(*)::int AS n FROM "${schema}".effects WHERE $1::text IS NULL OR topic = $1 GROUP BY message_id`,
    [topic ?? null],
  );
  return new Map(rows.map((r) => [r.message_id, r.n]));
}

export async function countRows(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${sql}) AS q`, params);
  return rows[0]?.n ?? 0;
}

/** The group's committed offsets of `topic`, by partition (kafkajs admin). */
export async function committedOffsets(groupId: string, topic: string): Promise<Map<number, string>> {
  const admin = testKafka().admin();
  await admin.connect();
  try {
    const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return new Map((entry?.partitions ?? []).map((p) => [p.partition, p.offset]));
  } finally {
    await admin.disconnect();
  }
}

/**
 * Whether the group has committed every partition of `topic` up to its end (high
 * watermark). The end, not the number of messages a test sent: the test producer is not
 * idempotent, and a retry after a lost response appends a partition's records again (CI
 * saw 90 records of 60 sent), which the consumer then skips as duplicates.
 */
export async function committedToEnd(groupId: string, topic: string): Promise<{ done: boolean; committed: Map<number, string>; ends: Map<number, string> }> {
  const committed = await committedOffsets(groupId, topic);
  const admin = testKafka().admin();
  await admin.connect();
  let ends: Map<number, string>;
  try {
    ends = new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, p.high]));
  } finally {
    await admin.disconnect();
  }
  const done = [...ends].every(([partition, end]) => end === '0' || committed.get(partition) === end);
  return { done, committed, ends };
}

/** The group's committed offset of one partition of `topic`. */
export async function committedOffset(groupId: string, topic: string, partition = 0): Promise<string | undefined> {
  return (await committedOffsets(groupId, topic)).get(partition);
}

/**
 * Consumer options for tests on the shared broker and a test schema: a group of its own,
 * short timeouts and retries so failures show in milliseconds, not seconds.
 */
export function testConsumerOptions(db: { pool: pg.Pool; schema: string }): {
  kafka: ReturnType<typeof testKafka>;
  groupId: string;
  pool: pg.Pool;
  schema: string;
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  maxWaitTimeMs: number;
  retryBaseDelayMs: number;
  retryMaxDelayMs: number;
} {
  return {
    kafka: testKafka(),
    groupId: uniqueName('group'),
    pool: db.pool,
    schema: db.schema,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    retryBaseDelayMs: 20,
    retryMaxDelayMs: 200,
  };
}

/**
 * The consumers of one test file: each made of testConsumerOptions(db()), then
 * `defaults`, then its own options; all stopped after the file's tests. `db` is a getter
 * since the schema is made in the file's before().
 */
export function testConsumers(
  db: () => { pool: pg.Pool; schema: string },
  defaults: () => Partial<ConsumerOptions<any>> = () => ({}), // eslint-disable-line @typescript-eslint/no-explicit-any
): <V = unknown>(options: Partial<ConsumerOptions<V>> & Pick<ConsumerOptions<V>, 'topics'>) => Consumer<V> {
  const running: Array<Consumer<unknown>> = [];
  after(async () => {
    await Promise.all(running.map((c) => c.stop()));
  });
  return <V = unknown>(options: Partial<ConsumerOptions<V>> & Pick<ConsumerOptions<V>, 'topics'>): Consumer<V> => {
    const c = createConsumer<V>({ ...testConsumerOptions(db()), ...defaults(), ...options } as ConsumerOptions<V>);
    running.push(c as Consumer<unknown>);
    return c;
  };
}

/** Every payload of `event` the consumer emits from now on, in order. */
export function collect<V, K extends keyof ConsumerEvents & string>(c: Consumer<V>, event: K): Array<ConsumerEvents[K]> {
  const seen: Array<ConsumerEvents[K]> = [];
  c.on(event, (payload) => void seen.push(payload));
  return seen;
}
