/**
 * 4. Consumer throughput: messages with relay-style headers on a topic of their own, read
 * by a raw kafkajs consumer (eachBatch, JSON.parse, no database) and by our consumer with
 * dedup and a one-row effect (one INSERT per message in the handler), in rounds, arms
 * alternating. The first arm is the one with the target; the others are compared with it.
 * A batch-handler arm (handleBatch: the same effect rows, one multi-row INSERT per
 * transaction) is always run too, appended when the arms given have none, with its own
 * target.
 */
import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import { createConsumer } from '../../src/consumer/consumer.js';
import type { ConsumerOptions as ConsumerRuntimeOptions } from '../../src/consumer/options.js';
import { benchSchema, createEffectsTable, createTopic, kafka, produceAmountMessages } from '../common.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log, mean, wall } from '../util.js';

export interface ConsumerArm {
  /** Short name, for the log. */
  key: string;
  /** The table's row label. */
  label: string;
  savepoints: 'on-failure' | 'always';
  /** handleBatch instead of handler: one `INSERT ... SELECT FROM unnest(...)` per transaction. */
  batch?: boolean;
  messagesPerTransaction?: number;
  /** Batches (partitions' transactions) handled at once (default: one per partition). */
  batchesInFlight?: number;
}

export interface ConsumerOptions {
  messages: number;
  partitions: number;
  rounds: number;
  arms: ConsumerArm[];
}

export interface ConsumerData {
  messages: number;
  partitions: number;
  raw: number[];
  arms: Array<ConsumerArm & { rates: number[]; transactions: number[]; cpuUsPerMessage: number[] }>;
}

/** The batch handler arm run beside the per-message ones (same messages, same effect table). */
export const BATCH_ARM: ConsumerArm = {
  key: 'batch',
  label: 'consumer, handleBatch: dedup + one-row effect, one multi-row INSERT per transaction (defaults: 500/transaction)',
  savepoints: 'on-failure',
  batch: true,
};

export async function consumer(pool: pg.Pool, o: ConsumerOptions): Promise<SectionResult<ConsumerData>> {
  const total = o.messages;
  const arms = o.arms.some((a) => a.batch) ? o.arms : [...o.arms, BATCH_ARM];
  const { schema, drop } = await benchSchema(pool, 'benchcons');
  await createEffectsTable(pool, schema);
  const topic = await createTopic(o.partitions);
  await produceAmountMessages(kafka(), topic, total);

  const raw = async (): Promise<number> => {
    const c = kafka().consumer({ groupId: `bench-raw-${randomUUID()}`, maxWaitTimeInMs: 100 });
    await c.connect();
    await c.subscribe({ topic, fromBeginning: true });
    let seen = 0;
    let first = 0;
    let last = 0;
    await new Promise<void>((resolve) => {
      void c.run({
        partitionsConsumedConcurrently: o.partitions,
        eachBatch: async ({ batch }) => {
          if (first === 0) first = wall();
          for (const message of batch.messages) JSON.parse(String(message.value));
          seen += batch.messages.length;
          if (seen >= total && last === 0) {
            last = wall();
            resolve();
          }
        },
      });
    });
    await c.disconnect();
    return (total * 1000) / (last - first);
  };

  const ours = async (arm: ConsumerArm): Promise<{ rate: number; transactions: number; cpuUsPerMessage: number }> => {
    await pool.query(`TRUNCATE "${schema}".effects`);
    let first = 0;
    let last = 0;
    let resolveDone!: () => void;
    const done = new Promise<void>((r) => (resolveDone = r));
    const effect = `INSERT INTO "${schema}".effects (message_id, entity, amount) VALUES ($1, $2, $3)`;
    const batchEffect = `INSERT INTO "${schema}".effects (message_id, entity, amount) SELECT * FROM unnest($1::text[], $2::text[], $3::int[])`;
    const handlers: Pick<ConsumerRuntimeOptions<{ amount: number }>, 'handler' | 'handleBatch'> = arm.batch
      ? {
          handleBatch: async (messages, { client }) => {
            if (first === 0) first = wall();
            await client.query(batchEffect, [messages.map((m) => m.messageId), messages.map((m) => m.key), messages.map((m) => m.value.amount)]);
          },
        }
      : {
          handler: async (message, { client }) => {
            if (first === 0) first = wall();
            await client.query(effect, [message.messageId, message.key, message.value.amount]);
          },
        };
    const c = createConsumer<{ amount: number }>({
      kafka: kafka(),
      groupId: `bench-ours-${randomUUID()}`,
      topics: topic,
      pool,
      schema,
      batchesInFlight: arm.batchesInFlight ?? o.partitions,
      maxWaitTimeMs: 100,
      savepoints: arm.savepoints,
      ...(arm.messagesPerTransaction !== undefined && { messagesPerTransaction: arm.messagesPerTransaction }),
      ...handlers,
    });
    c.on('offsetCommitted', () => {
      if (c.stats().processed >= total && last === 0) {
        last = wall();
        resolveDone();
      }
    });
    const cpu0 = process.cpuUsage();
    await c.start();
    await done;
    const cpu = process.cpuUsage(cpu0);
    await c.stop();
    const { rows: r } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".effects`);
    if (r[0]!.n !== total) throw new Error(`consumer bench: ${r[0]!.n} effects for ${total} messages`);
    return { rate: (total * 1000) / (last - first), transactions: c.stats().transactions, cpuUsPerMessage: (cpu.user + cpu.system) / total };
  };

  const data: ConsumerData = { messages: total, partitions: o.partitions, raw: [], arms: arms.map((a) => ({ ...a, rates: [], transactions: [], cpuUsPerMessage: [] })) };
  try {
    for (let round = 0; round < o.rounds; round++) {
      data.raw.push(await raw());
      for (const arm of data.arms) {
        const r = await ours(arm);
        arm.rates.push(r.rate);
        arm.transactions.push(r.transactions);
        arm.cpuUsPerMessage.push(r.cpuUsPerMessage);
      }
      log(`consumer round ${round + 1}: raw ${fmt(data.raw.at(-1)!)}, ${data.arms.map((a) => `${a.key} ${fmt(a.rates.at(-1)!)}`).join(', ')} msg/s`);
    }
  } finally {
    await drop();
  }
  const [main, ...others] = data.arms;
  if (!main) throw new Error('consumer section: no arm');
  const ours0 = mean(main.rates);
  const rows: Row[] = [
    row('4. consumer', 'raw kafkajs consumer (eachBatch, JSON.parse, no database)', `${fmt(mean(data.raw))} msg/s`),
    row('4. consumer', main.label, `${fmt(ours0)} msg/s`, '≥ 15,000', ours0 >= 15_000),
    row('4. consumer', 'consumer / raw kafkajs', fmt(ours0 / mean(data.raw), 3)),
    ...others.map((a) =>
      a.batch
        ? row('4. consumer', a.label, `${fmt(mean(a.rates))} msg/s (${fmt(mean(a.rates) / ours0, 2)} × per message)`, '≥ 60,000', mean(a.rates) >= 60_000)
        : row('4. consumer', a.label, `${fmt(mean(a.rates))} msg/s (now ${fmt(ours0 / mean(a.rates), 2)} ×)`),
    ),
  ];
  return { data, rows };
}
