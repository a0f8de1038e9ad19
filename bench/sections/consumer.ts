/**
 * 4. Consumer throughput: messages with relay-style headers on a topic of their own, read
 * by a raw kafkajs consumer (eachBatch, JSON.parse, no database) and by our consumer with
 * dedup and a one-row effect (one INSERT per message in the handler), in rounds, arms
 * alternating. The first arm is the one with the target; the others are compared with it.
 * A batch-handler arm (handleBatch: the same effect rows, one multi-row INSERT per
 * transaction) is always run too, appended when the arms given have none, with its own
 * target; and so is the same batch arm with poison messages (POISON_ARM), compared with
 * the clean batch arm of the same round (target: at least 0.8 of its rate).
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
  /**
   * This share of the messages, spread over the run, is poison: the batch handler throws
   * a permanent error for a batch holding one, so each is found and dead-lettered.
   */
  poison?: { count: number; per: number };
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
  arms: Array<ConsumerArm & { rates: number[]; transactions: number[]; cpuUsPerMessage: number[]; fallbacks: number[] }>;
}

/** The batch handler arm run beside the per-message ones (same messages, same effect table). */
export const BATCH_ARM: ConsumerArm = {
  key: 'batch',
  label: 'consumer, handleBatch: dedup + one-row effect, one multi-row INSERT per transaction (defaults: 500/transaction)',
  savepoints: 'on-failure',
  batch: true,
};

/**
 * The batch arm again with poison messages at the issue 19 measure's density, 3 in
 * 20,000 (2 in the quick profile's 10,000, 8 in the full one's 50,000), to compare with
 * the clean batch arm of the same run.
 */
export const POISON_ARM: ConsumerArm = {
  key: 'batch+poison',
  label: 'consumer, handleBatch as above, with poison messages (3 per 20,000; each dead-lettered after one failed batch)',
  savepoints: 'on-failure',
  batch: true,
  poison: { count: 3, per: 20_000 },
};

/**
 * Which messages (by `seq`) are poison: `density` of them, at least one, spread over the
 * run and over the keys (so over the partitions), none at either end.
 */
function poisonSeqs(total: number, density: { count: number; per: number } | undefined): Set<number> {
  if (!density || density.count <= 0) return new Set();
  const n = Math.max(1, Math.round((total * density.count) / density.per));
  return new Set(Array.from({ length: n }, (_, i) => (Math.floor(((i + 1) * total) / (n + 1)) + 333 * i) % total));
}

export async function consumer(pool: pg.Pool, o: ConsumerOptions): Promise<SectionResult<ConsumerData>> {
  const total = o.messages;
  const withBatch = o.arms.some((a) => a.batch && !a.poison) ? o.arms : [...o.arms, BATCH_ARM];
  const arms = withBatch.some((a) => a.poison) ? withBatch : [...withBatch, POISON_ARM];
  const { schema, drop } = await benchSchema(pool, 'benchcons');
  await createEffectsTable(pool, schema);
  const topic = await createTopic(o.partitions);
  const deadLetterTopic = await createTopic(o.partitions);
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

  const ours = async (arm: ConsumerArm): Promise<{ rate: number; transactions: number; cpuUsPerMessage: number; fallbacks: number }> => {
    await pool.query(`TRUNCATE "${schema}".effects`);
    const poison = poisonSeqs(total, arm.poison);
    const good = total - poison.size;
    let first = 0;
    let last = 0;
    let resolveDone!: () => void;
    const done = new Promise<void>((r) => (resolveDone = r));
    const effect = `INSERT INTO "${schema}".effects (message_id, entity, amount) VALUES ($1, $2, $3)`;
    const batchEffect = `INSERT INTO "${schema}".effects (message_id, entity, amount) SELECT * FROM unnest($1::text[], $2::text[], $3::int[])`;
    const handlers: Pick<ConsumerRuntimeOptions<{ amount: number; seq: number }>, 'handler' | 'handleBatch'> = arm.batch
      ? {
          handleBatch: async (messages, { client }) => {
            if (first === 0) first = wall();
            await client.query(batchEffect, [messages.map((m) => m.messageId), messages.map((m) => m.key), messages.map((m) => m.value.amount)]);
            if (poison.size > 0 && messages.some((m) => poison.has(m.value.seq))) throw Object.assign(new Error('poison message'), { name: 'ValidationError' });
          },
        }
      : {
          handler: async (message, { client }) => {
            if (first === 0) first = wall();
            await client.query(effect, [message.messageId, message.key, message.value.amount]);
          },
        };
    const c = createConsumer<{ amount: number; seq: number }>({
      kafka: kafka(),
      groupId: `bench-ours-${randomUUID()}`,
      topics: topic,
      pool,
      schema,
      batchesInFlight: arm.batchesInFlight ?? o.partitions,
      maxWaitTimeMs: 100,
      savepoints: arm.savepoints,
      ...(poison.size > 0 && { deadLetterTopic: deadLetterTopic }),
      ...(arm.messagesPerTransaction !== undefined && { messagesPerTransaction: arm.messagesPerTransaction }),
      ...handlers,
    });
    c.on('offsetCommitted', () => {
      if (c.stats().processed >= good && c.stats().deadLettered >= poison.size && last === 0) {
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
    if (r[0]!.n !== good) throw new Error(`consumer bench: ${r[0]!.n} effects for ${good} messages`);
    if (c.stats().deadLettered !== poison.size) throw new Error(`consumer bench: ${c.stats().deadLettered} dead letters for ${poison.size} poison messages`);
    return { rate: (total * 1000) / (last - first), transactions: c.stats().transactions, cpuUsPerMessage: (cpu.user + cpu.system) / total, fallbacks: c.stats().batchFallbacks };
  };

  const data: ConsumerData = { messages: total, partitions: o.partitions, raw: [], arms: arms.map((a) => ({ ...a, rates: [], transactions: [], cpuUsPerMessage: [], fallbacks: [] })) };
  try {
    for (let round = 0; round < o.rounds; round++) {
      data.raw.push(await raw());
      for (const arm of data.arms) {
        const r = await ours(arm);
        arm.rates.push(r.rate);
        arm.transactions.push(r.transactions);
        arm.cpuUsPerMessage.push(r.cpuUsPerMessage);
        arm.fallbacks.push(r.fallbacks);
      }
      log(`consumer round ${round + 1}: raw ${fmt(data.raw.at(-1)!)}, ${data.arms.map((a) => `${a.key} ${fmt(a.rates.at(-1)!)}`).join(', ')} msg/s`);
    }
  } finally {
    await drop();
  }
  const [main, ...others] = data.arms;
  if (!main) throw new Error('consumer section: no arm');
  const ours0 = mean(main.rates);
  // The clean batch arm of this run, which the poison arm is compared with.
  const clean = mean(data.arms.find((a) => a.batch && !a.poison)?.rates ?? [NaN]);
  const rows: Row[] = [
    row('4. consumer', 'raw kafkajs consumer (eachBatch, JSON.parse, no database)', `${fmt(mean(data.raw))} msg/s`),
    row('4. consumer', main.label, `${fmt(ours0)} msg/s`, '≥ 15,000', ours0 >= 15_000),
    row('4. consumer', 'consumer / raw kafkajs', fmt(ours0 / mean(data.raw), 3)),
    ...others.map((a) => {
      if (a.poison) {
        const ratio = mean(a.rates) / clean;
        return row('4. consumer', `${a.label}: ${poisonSeqs(total, a.poison).size} in ${fmt(total)}`, `${fmt(mean(a.rates))} msg/s (${fmt(ratio, 2)} × clean batch; ${a.fallbacks.join(', ')} fallbacks)`, '≥ 0.8 × clean', ratio >= 0.8);
      }
      return a.batch
        ? row('4. consumer', a.label, `${fmt(mean(a.rates))} msg/s (${fmt(mean(a.rates) / ours0, 2)} × per message)`, '≥ 60,000', mean(a.rates) >= 60_000)
        : row('4. consumer', a.label, `${fmt(mean(a.rates))} msg/s (now ${fmt(ours0 / mean(a.rates), 2)} ×)`);
    }),
  ];
  return { data, rows };
}
