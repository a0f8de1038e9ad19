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
import { armHere } from '../armFacts.js';

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
  /**
   * The case a user measured (issue 33): handleBatch at the consumer's defaults (fetch
   * wait, batches in flight) on a topic of `messages` messages of its own, clean and with
   * `poison` poison messages spread over it, once per partition count, clean and poisoned
   * alternating in each round. Default: 20,000 messages, 3 poison, 1 and 4 partitions.
   */
  userCase?: { messages: number; poison: number; partitions: number[] };
}

export interface ConsumerData {
  messages: number;
  partitions: number;
  raw: number[];
  /** The user's case per partition count: clean and poisoned rates, and each run's seconds, per round. */
  userCase: Array<{ partitions: number; messages: number; poison: number; clean: number[]; poisoned: number[]; cleanSeconds: number[]; poisonedSeconds: number[]; fallbacks: number[] }>;
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

  /**
   * One run of our consumer over `on.total` messages of `on.topic`. `on.defaults`: only
   * the options a user must give (and the dead-letter topic), the rest at their defaults.
   */
  const ours = async (
    arm: ConsumerArm,
    on: { topic: string; total: number; partitions: number; defaults: boolean } = { topic, total, partitions: o.partitions, defaults: false },
  ): Promise<{ rate: number; seconds: number; transactions: number; cpuUsPerMessage: number; fallbacks: number }> => {
    await pool.query(`TRUNCATE "${schema}".effects`);
    const total = on.total;
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
      topics: on.topic,
      pool,
      schema,
      ...(!on.defaults && { batchesInFlight: arm.batchesInFlight ?? on.partitions, maxWaitTimeMs: 100, savepoints: arm.savepoints }),
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
    return { rate: (total * 1000) / (last - first), seconds: (last - first) / 1000, transactions: c.stats().transactions, cpuUsPerMessage: (cpu.user + cpu.system) / total, fallbacks: c.stats().batchFallbacks };
  };

  const userCase = o.userCase ?? { messages: 20_000, poison: 3, partitions: [1, 4] };
  const userTopics = await Promise.all(userCase.partitions.map(async (partitions) => ({ partitions, topic: await createTopic(partitions) })));
  for (const u of userTopics) await produceAmountMessages(kafka(), u.topic, userCase.messages);
  const userPoison: ConsumerArm = { ...BATCH_ARM, key: 'user case, poisoned', poison: { count: userCase.poison, per: userCase.messages } };
  const data: ConsumerData = {
    messages: total,
    partitions: o.partitions,
    raw: [],
    userCase: userTopics.map((u) => ({ partitions: u.partitions, messages: userCase.messages, poison: userCase.poison, clean: [], poisoned: [], cleanSeconds: [], poisonedSeconds: [], fallbacks: [] })), arms: arms.map((a) => ({ ...a, rates: [], transactions: [], cpuUsPerMessage: [], fallbacks: [] })) };
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
      for (const [i, u] of userTopics.entries()) {
        const d = data.userCase[i]!;
        const on = { topic: u.topic, total: userCase.messages, partitions: u.partitions, defaults: true };
        // Alternating which goes first, round by round.
        for (const poisoned of round % 2 === 0 ? [false, true] : [true, false]) {
          const r = await ours(poisoned ? userPoison : BATCH_ARM, on);
          if (poisoned) {
            d.poisoned.push(r.rate);
            d.poisonedSeconds.push(r.seconds);
            d.fallbacks.push(r.fallbacks);
          } else {
            d.clean.push(r.rate);
            d.cleanSeconds.push(r.seconds);
          }
        }
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
    row('4. consumer', 'raw kafkajs consumer (eachBatch, JSON.parse, no database)', `${fmt(mean(data.raw))} msg/s`, undefined, undefined, [armHere('raw', 'kafkajs')]),
    row('4. consumer', main.label, `${fmt(ours0)} msg/s`, '≥ 15,000', ours0 >= 15_000),
    row('4. consumer', 'consumer / raw kafkajs', fmt(ours0 / mean(data.raw), 3), undefined, undefined, [armHere('consumer', 'kafkajs'), armHere('raw', 'kafkajs')]),
    ...others.map((a) => {
      if (a.poison) {
        const ratio = mean(a.rates) / clean;
        return row('4. consumer', `${a.label}: ${poisonSeqs(total, a.poison).size} in ${fmt(total)}`, `${fmt(mean(a.rates))} msg/s (${fmt(ratio, 2)} × clean batch; ${a.fallbacks.join(', ')} fallbacks)`, '≥ 0.8 × clean', ratio >= 0.8);
      }
      return a.batch
        ? row('4. consumer', a.label, `${fmt(mean(a.rates))} msg/s (${fmt(mean(a.rates) / ours0, 2)} × per message)`, '≥ 60,000', mean(a.rates) >= 60_000)
        : row('4. consumer', a.label, `${fmt(mean(a.rates))} msg/s (now ${fmt(ours0 / mean(a.rates), 2)} ×)`);
    }),
    // The user's case: the rate ratio, and what each poison message cost in seconds of
    // the run (the poisoned run's time over the clean one's, per poison message): a cost
    // per poison message that does not shrink with the run makes the ratio depend on
    // the run's length and on how many partitions go on meanwhile.
    ...data.userCase.map((u) => {
      const ratio = mean(u.poisoned) / mean(u.clean);
      const msPerPoison = ((mean(u.poisonedSeconds) - mean(u.cleanSeconds)) * 1000) / u.poison;
      return row(
        '4. consumer',
        `user's case: handleBatch at the consumer's defaults, ${fmt(u.messages)} messages on ${u.partitions} partition${u.partitions === 1 ? '' : 's'}, ${u.poison} poison spread over them against none`,
        `${fmt(mean(u.poisoned))} against ${fmt(mean(u.clean))} msg/s (${fmt(ratio, 2)} × clean; ${fmt(msPerPoison)} ms per poison message; ${u.fallbacks.join(', ')} fallbacks)`,
        '≥ 0.8 × clean',
        ratio >= 0.8,
      );
    }),
  ];
  return { data, rows };
}
