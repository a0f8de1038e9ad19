/**
 * 1. Ceilings: what the relay could reach at most on this machine. (a) A raw kafkajs producer
 * sending the relay's messages (same key, value and headers) in batches of 500 with acks=all,
 * two sends in flight as the relay's two batches; (a') the same with a raw @platformatic/kafka
 * producer, the other producer adapter's client; (b) a raw Postgres claim-and-mark loop on
 * the same backlog: two loops on disjoint halves of the shards, each BEGIN; SELECT … FOR
 * UPDATE SKIP LOCKED LIMIT 500; UPDATE sent_at; COMMIT, synchronous_commit off as the relay
 * has it. No Postgres in (a), no Kafka in (b).
 */
import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import { Partitioners, type Message } from 'kafkajs';
import type { MessageToProduce } from '@platformatic/kafka';
import { armHere } from '../armFacts.js';
import { HEADERS } from '../../src/shared/kafka.js';
import { BATCH, KEYS, PARTITIONS, PAYLOAD, benchSchema, brokers, createTopic, fillBacklog, kafka } from '../common.js';
import { row, type SectionResult } from '../report.js';
import { fmt, wall } from '../util.js';

export interface CeilingsOptions {
  /** Rows sent (a) and claimed and marked (b). */
  rows: number;
  keys?: number;
}

export interface Ceilings {
  /** Ceiling 1: rows/s of the raw producer (kafkajs, the default adapter's client). */
  kafkaProducer: number;
  /** Ceiling 1 of the platformatic adapter: rows/s of a raw @platformatic/kafka producer. */
  platformaticProducer: number;
  /** Ceiling 2: rows/s of the raw claim-and-mark loop. */
  postgresClaimAndMark: number;
}

function kafkaMessages(n: number, offset: number, keys: number): Message[] {
  return Array.from({ length: n }, (_, j) => ({
    key: `key-${(offset + j) % keys}`,
    value: PAYLOAD,
    headers: { [HEADERS.messageId]: randomUUID(), [HEADERS.outboxId]: String(offset + j), [HEADERS.contentType]: 'application/json' },
  }));
}

async function kafkaCeiling(total: number, keys: number): Promise<number> {
  const topic = await createTopic(PARTITIONS);
  const producer = kafka().producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const batches: Message[][] = [];
  for (let i = 0; i < total; i += BATCH) batches.push(kafkaMessages(Math.min(BATCH, total - i), i, keys));
  let next = 0;
  const started = wall();
  await Promise.all(
    [0, 1].map(async () => {
      while (next < batches.length) {
        const messages = batches[next++]!;
        await producer.sendBatch({ topicMessages: [{ topic, messages }], acks: -1 });
      }
    }),
  );
  const seconds = (wall() - started) / 1000;
  await producer.disconnect();
  return total / seconds;
}

/** The last platformatic ceiling measured in this process, for the drain section's ratios (NaN before). */
export let platformaticCeiling = NaN;

async function platformaticKafkaCeiling(total: number, keys: number): Promise<number> {
  const { Producer } = await import('@platformatic/kafka');
  const topic = await createTopic(PARTITIONS);
  const producer = new Producer<Buffer, Buffer, Buffer, Buffer>({ clientId: 'bench', bootstrapBrokers: brokers(), acks: -1, idempotent: false, timeout: 30_000 });
  // The same messages as kafkajs' (bytes: the client's noop serializers take Buffers),
  // keyed, partitioned by the client's default partitioner (murmur2 of the key).
  const value = Buffer.from(PAYLOAD);
  const batches: Array<Array<MessageToProduce<Buffer, Buffer, Buffer, Buffer>>> = [];
  for (let i = 0; i < total; i += BATCH) {
    batches.push(
      kafkaMessages(Math.min(BATCH, total - i), i, keys).map((m) => ({
        topic,
        key: Buffer.from(m.key as string),
        value,
        headers: new Map(Object.entries(m.headers as Record<string, string>).map(([k, v]) => [Buffer.from(k), Buffer.from(v)])),
      })),
    );
  }
  // Connected and the cluster known before the timing, as kafkajs' connect() leaves it;
  // the topic's metadata is fetched inside it, as kafkajs' first send does.
  await producer.metadata({ topics: [] });
  let next = 0;
  const started = wall();
  await Promise.all(
    [0, 1].map(async () => {
      while (next < batches.length) {
        const messages = batches[next++]!;
        await producer.send({ messages, acks: -1 });
      }
    }),
  );
  const seconds = (wall() - started) / 1000;
  await producer.close();
  platformaticCeiling = total / seconds;
  return platformaticCeiling;
}

async function postgresCeiling(pool: pg.Pool, total: number, keys: number): Promise<number> {
  const { schema, drop } = await benchSchema(pool, 'benchceil');
  try {
    const topic = await createTopic(1);
    await fillBacklog(pool, schema, topic, total, keys);
    const claim = `SELECT id, message_id, topic, key, payload::text AS payload, payload_bytes, headers, created_at
                     FROM "${schema}".outbox WHERE sent_at IS NULL AND shard = ANY($1::smallint[])
                    ORDER BY id LIMIT ${BATCH} FOR UPDATE SKIP LOCKED`;
    const mark = `UPDATE "${schema}".outbox SET sent_at = now() WHERE id = ANY($1::bigint[])`;
    let done = 0;
    const started = wall();
    await Promise.all(
      [0, 1].map(async (half) => {
        const shards = Array.from({ length: 128 }, (_, i) => i * 2 + half);
        const client = await pool.connect();
        try {
          await client.query('SET synchronous_commit = off');
          for (;;) {
            await client.query('BEGIN');
            const { rows: claimed } = await client.query<{ id: string }>(claim, [shards]);
            if (claimed.length > 0) await client.query(mark, [claimed.map((r) => r.id)]);
            await client.query('COMMIT');
            done += claimed.length;
            if (claimed.length === 0) break;
          }
        } finally {
          client.release();
        }
      }),
    );
    const seconds = (wall() - started) / 1000;
    if (done !== total) throw new Error(`claim-and-mark loop marked ${done} of ${total}`);
    return total / seconds;
  } finally {
    await drop();
  }
}

export async function ceilings(pool: pg.Pool, o: CeilingsOptions): Promise<SectionResult<Ceilings>> {
  const keys = o.keys ?? KEYS;
  const kafkaProducer = await kafkaCeiling(o.rows, keys);
  const platformaticProducer = await platformaticKafkaCeiling(o.rows, keys);
  const postgresClaimAndMark = await postgresCeiling(pool, o.rows, keys);
  return {
    data: { kafkaProducer, platformaticProducer, postgresClaimAndMark },
    rows: [
      row('1. ceilings', `raw kafkajs producer, batch ${BATCH}, acks=all, 2 in flight (ceiling 1)`, `${fmt(kafkaProducer)} rows/s`, undefined, undefined, [armHere('raw', 'kafkajs')]),
      row('1. ceilings', `raw @platformatic/kafka producer, batch ${BATCH}, acks=all, 2 in flight (ceiling 1 of the platformatic adapter)`, `${fmt(platformaticProducer)} rows/s, ${fmt(platformaticProducer / kafkaProducer, 2)} × kafkajs'`, undefined, undefined, [armHere('raw', 'platformatic')]),
      row('1. ceilings', `raw Postgres claim-and-mark loop, batch ${BATCH}, 2 loops (ceiling 2)`, `${fmt(postgresClaimAndMark)} rows/s`),
    ],
  };
}
