/**
 * A relay or a consumer in a process of its own, for bench/children.ts: it reports on stdout, as
 * JSON lines, what the parent needs to time it without sharing its event loop.
 *
 *   node .cache/bench-build/child.mjs relay    (env BENCH_SCHEMA, BENCH_RELAY_OPTIONS as JSON; BENCH_RELAY_METRICS=1: with the metrics' sampler)
 *   node .cache/bench-build/child.mjs consumer (env BENCH_SCHEMA, BENCH_TOPIC, BENCH_GROUP, BENCH_PARTITIONS)
 *   node .cache/bench-build/child.mjs reader   (env BENCH_TOPIC, BENCH_GROUP, BENCH_PARTITIONS)
 *   node .cache/bench-build/child.mjs queue    (env BENCH_SCHEMA, BENCH_CLIENT_ID: a plain SKIP LOCKED queue, bench/plainQueue.ts)
 *
 * Lines: {"ready":true,"ran":{...}} once started, with what the relay or consumer announced
 * on its diagnostics channel (bench/armFacts.ts: client, its version, delivery, Node, commit); {"t":ms,"rss":bytes,"acks":[[outboxId,ms],...]} 200 ms
 * after the first acknowledgement since the last line, none while nothing is acknowledged (relay: when Kafka acknowledged the row's batch, or in exactly-once mode committed
 * the transaction holding it; consumer: when its handler started; reader, a bare kafkajs
 * consumer reading committed records only: when a fetch returned the row). Times are wall-clock milliseconds with sub-millisecond precision
 * (performance.timeOrigin + performance.now()), comparable across processes.
 * SIGTERM stops it cleanly; {"done":true,"peakRss":bytes,"timing":{...}} is the last line
 * (relay: milliseconds spent in Kafka sends and in whole batches).
 */
import pg from 'pg';
import { Partitioners, type Kafka, type Producer, type ProducerBatch, type Transaction } from 'kafkajs';
import { createKafka, HEADERS } from '../src/shared/kafka.js';
import { createRelay } from '../src/relay/relay.js';
import { instrumentRelay } from '../src/metrics/relayMetrics.js';
import type { RelayOptions } from '../src/relay/options.js';
import { createConsumer } from '../src/consumer/consumer.js';
import { createLogger, silentLogger } from '../src/shared/logger.js';
import { armHere, onConsumerStarted, onRelayStarted, type ArmFacts } from './armFacts.js';
import diagnosticsChannel from 'node:diagnostics_channel';
import { PROGRESS_READ_CHANNEL } from '../src/relay/exactlyOnceUnit.js';
import { startPlainQueueWorker } from './plainQueue.js';

const mode = process.argv[2];
const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const schema = process.env.BENCH_SCHEMA ?? 'public';
const now = (): number => performance.timeOrigin + performance.now();

let acks: Array<[number, number]> = [];
/** What the relay or consumer in this process announced when it started (its ready line carries it). */
let ran: ArmFacts | undefined;

let peakRss = 0;
/**
 * Relay: time in Kafka sends and in whole batches (claim, send, mark, commit), summed; and
 * rows acknowledged through each recording below, so the parent can tell which client and
 * which mode actually published.
 */
const timing = {
  sendMs: 0,
  sends: 0,
  batchMs: 0,
  batches: 0,
  ackedVia: { kafkajs: 0, 'kafkajs transaction': 0, platformatic: 0, 'platformatic transaction': 0 },
  /** Of the rows acknowledged outside transactions, those whose value was in Confluent's wire format (byte 0 then a schema id): encodings at work (section 20). */
  ackedFramed: 0,
  /** Exactly-once: rows a restarted unit marked sent from its progress (their commit's answer was lost to an error), and failed batches. */
  markedFromProgress: 0,
  batchErrors: 0,
};
function report(): void {
  flushTimer = undefined;
  const rss = process.memoryUsage.rss();
  peakRss = Math.max(peakRss, rss);
  process.stdout.write(`${JSON.stringify({ t: now(), rss, acks })}\n`);
  acks = [];
}

// A line at most every 200 ms, and only after something was acknowledged: an idle relay's
// process must not wake for the bench (section 17 measures its idle CPU; a line every
// 200 ms cost it about as much as its own idle work). Peak RSS comes from the kernel at
// the end, so it needs no sampling between lines.
let flushTimer: NodeJS.Timeout | undefined;
/** Every id acknowledged so far (exactly-once: a unit's progress may name rows already counted). */
const acked = new Set<number>();
function ack(id: number, t: number): void {
  acked.add(id);
  acks.push([id, t]);
  flushTimer ??= setTimeout(report, 200);
}

/** Whether a sent value is in Confluent's wire format: the magic byte 0, then a 4-byte schema id (JSON text never starts with byte 0). */
function framed(value: unknown): boolean {
  return Buffer.isBuffer(value) && value.length >= 5 && value[0] === 0;
}

/** A kafkajs client whose producers record when each message's batch was acknowledged. */
function recordingKafka(): Kafka {
  const kafka = createKafka({ brokers, clientId: 'bench-relay', logger: silentLogger() });
  const producer = kafka.producer.bind(kafka);
  kafka.producer = (config) => {
    const p: Producer = producer(config);
    const sendBatch = p.sendBatch.bind(p);
    p.sendBatch = async (batch: ProducerBatch) => {
      const result = await sendBatch(batch);
      const t = now();
      timing.sends++;
      for (const tm of batch.topicMessages ?? []) {
        timing.ackedVia.kafkajs += tm.messages.length;
        for (const m of tm.messages) {
          ack(Number(m.headers?.[HEADERS.outboxId]?.toString()), t);
          if (framed(m.value)) timing.ackedFramed++;
        }
      }
      return result;
    };
    // Exactly-once mode sends through a transaction's own sendBatch, which the patch above
    // does not see, and its records exist for a read_committed reader only once the
    // transaction commits: so a row counts as acknowledged when its commit returns.
    const transaction = p.transaction.bind(p);
    p.transaction = async (): Promise<Transaction> => {
      const tx = await transaction();
      const ids: number[] = [];
      return {
        ...tx,
        sendBatch: async (batch: ProducerBatch) => {
          const result = await tx.sendBatch(batch);
          for (const tm of batch.topicMessages ?? []) for (const m of tm.messages) ids.push(Number(m.headers?.[HEADERS.outboxId]?.toString()));
          return result;
        },
        commit: async () => {
          await tx.commit();
          const t = now();
          timing.sends++;
          timing.ackedVia['kafkajs transaction'] += ids.length;
          for (const id of ids) ack(id, t);
        },
      };
    };
    return p;
  };
  return kafka;
}

/**
 * The same recording for the platformatic adapter: its client's `send` (one per
 * partition, as kafkajs' sendBatch is), patched on the class the adapter imports.
 */
async function recordPlatformaticSends(): Promise<void> {
  const { Producer } = await import('@platformatic/kafka');
  type Messages = Array<{ headers?: Map<Buffer, Buffer> | Record<string, Buffer> }>;
  type Send = (this: { transaction?: unknown }, options: { messages: Messages }, callback?: unknown) => unknown;
  type Tx = { send(options: { messages: Messages }): Promise<unknown>; commit(): Promise<void> };
  const proto = Producer.prototype as unknown as { send: Send; beginTransaction(this: unknown, ...args: unknown[]): Promise<Tx>; transaction?: unknown };
  const send = proto.send;
  const outboxIdHeader = Buffer.from(HEADERS.outboxId);
  const idOf = (m: Messages[number]): number => {
    const headers = m.headers instanceof Map ? [...m.headers] : [];
    return Number(headers.find(([k]) => k.equals(outboxIdHeader))?.[1]?.toString());
  };
  proto.send = function (this: { transaction?: unknown }, options, callback) {
    // A transaction's sends (exactly-once) count at its commit, below.
    if (callback || this.transaction) return send.call(this, options, callback);
    return (send.call(this, options) as Promise<unknown>).then((result) => {
      const t = now();
      timing.sends++;
      timing.ackedVia.platformatic += options.messages.length;
      for (const m of options.messages) {
        ack(idOf(m), t);
        if (framed((m as { value?: unknown }).value)) timing.ackedFramed++;
      }
      return result;
    });
  };
  // Exactly-once: as with kafkajs, a row counts as acknowledged when its transaction's commit returns.
  const begin = proto.beginTransaction;
  proto.beginTransaction = async function (this: unknown, ...args: unknown[]) {
    const tx = await begin.apply(this, args);
    const ids: number[] = [];
    const txSend = tx.send.bind(tx);
    const commit = tx.commit.bind(tx);
    tx.send = async (options) => {
      const result = await txSend(options);
      for (const m of options.messages) ids.push(idOf(m));
      return result;
    };
    tx.commit = async () => {
      await commit();
      const t = now();
      timing.sends++;
      timing.ackedVia['platformatic transaction'] += ids.length;
      for (const id of ids) ack(id, t);
    };
    return tx;
  };
}

/**
 * The relay's log destination: every line to stderr, and each warning (pino level 40 and
 * up) also as a JSON line on stdout, {"t":ms,"warning":message,"blockerPid":pid}, with the
 * pid of the blocking backend the warning names, if it names one.
 */
function warningsReported(): { write(line: string): void } {
  return {
    write(line: string) {
      process.stderr.write(line);
      let entry: { level?: number; msg?: string; blocker?: { pid?: number } };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        return;
      }
      if ((entry.level ?? 0) >= 40) process.stdout.write(`${JSON.stringify({ t: now(), warning: entry.msg ?? '', blockerPid: entry.blocker?.pid })}\n`);
    },
  };
}

async function main(): Promise<void> {
  let stop: () => Promise<unknown>;
  if (mode === 'relay') {
    const options = JSON.parse(process.env.BENCH_RELAY_OPTIONS ?? '{}') as Partial<RelayOptions>;
    // Named, not left out: a relay given a kafkajs client (the recording one, below) and
    // no producer publishes through that client, so "the defaults" would be kafkajs.
    const producer = options.producer ?? 'platformatic';
    if (producer === 'platformatic') await recordPlatformaticSends();
    // What the relay itself says it runs on, not what it was given.
    const stopObserving = onRelayStarted((m) => (ran = armHere('relay', m.producer, m.delivery, m.units)));
    const relay = createRelay({
      databaseUrl,
      kafkaBrokers: brokers,
      schema,
      kafka: recordingKafka(),
      // On stderr, which the bench passes through: stdout carries the child's JSON lines,
      // where each warning is also reported, with its time (the held-horizon section counts them).
      logger: createLogger('warn', warningsReported()),
      ...options,
      producer,
    });
    // A unit whose Kafka commit went through but whose answer was lost (an error, a timeout)
    // starts again and marks the rows its progress names sent: delivered, by a commit no
    // recording above saw. Counted when marked, once each, so a drain does not wait for them.
    diagnosticsChannel.subscribe(PROGRESS_READ_CHANNEL, (message) => {
      const fresh = (message as { ids: number[] }).ids.filter((id) => !acked.has(id));
      if (fresh.length === 0) return;
      const t = now();
      timing.markedFromProgress += fresh.length;
      timing.ackedVia[producer === 'kafkajs' ? 'kafkajs transaction' : 'platformatic transaction'] += fresh.length;
      for (const id of fresh) ack(id, t);
    });
    relay.on('batchError', () => timing.batchErrors++);
    relay.on('batch', (b) => {
      // The batch's publish step as the relay timed it: its per-partition requests run at
      // once, so the sum of their durations would count the same wall time several times.
      timing.sendMs += b.publishMs;
      timing.batchMs += b.durationMs;
      timing.batches++;
    });
    await relay.start();
    stopObserving();
    // As `outbox-relay run` does by default: the metrics' sampler reads the outbox every
    // metricsSampleIntervalMs (src/metrics/backlogSampler.ts), which costs Postgres too.
    const metrics = process.env.BENCH_RELAY_METRICS === '1' ? instrumentRelay(relay, { processMetrics: false }) : undefined;
    stop = async () => {
      await metrics?.close();
      await relay.stop();
    };
  } else if (mode === 'consumer') {
    const partitions = Number(process.env.BENCH_PARTITIONS ?? 6);
    const pool = new pg.Pool({ connectionString: databaseUrl, max: partitions + 2 });
    const effect = `INSERT INTO "${schema}".effects (message_id, entity, amount) VALUES ($1, $2, $3)`;
    const stopObserving = onConsumerStarted((m) => (ran = armHere('consumer', m.client)));
    const consumer = createConsumer<{ i: number }>({
      kafkaBrokers: brokers,
      groupId: process.env.BENCH_GROUP ?? 'bench',
      topics: process.env.BENCH_TOPIC ?? 'bench',
      pool,
      schema,
      batchesInFlight: partitions,
      maxWaitTimeMs: 10,
      logger: createLogger('warn'),
      handler: async (message, { client }) => {
        ack(Number(message.headers[HEADERS.outboxId]), now());
        await client.query(effect, [message.messageId, message.key, 1]);
      },
    });
    await consumer.start();
    stopObserving();
    stop = async () => {
      await consumer.stop();
      await pool.end();
    };
  } else if (mode === 'reader') {
    // No Postgres and no handler work: when a reader that sees committed records only
    // (kafkajs' default isolation, read_committed) could first have seen each row.
    const kafka = createKafka({ brokers, clientId: 'bench-reader', logger: silentLogger() });
    const reader = kafka.consumer({ groupId: process.env.BENCH_GROUP ?? 'bench-reader', maxWaitTimeInMs: 10, readUncommitted: false });
    await reader.connect();
    ran = armHere('raw', 'kafkajs');
    await reader.subscribe({ topic: process.env.BENCH_TOPIC ?? 'bench', fromBeginning: true });
    await reader.run({
      partitionsConsumedConcurrently: Number(process.env.BENCH_PARTITIONS ?? 6),
      eachBatch: async ({ batch }) => {
        const t = now();
        for (const m of batch.messages) ack(Number(m.headers?.[HEADERS.outboxId]?.toString()), t);
      },
    });
    stop = () => reader.disconnect();
  } else if (mode === 'queue') {
    // A plain SKIP LOCKED queue's worker (bench/plainQueue.ts), publishing with kafkajs.
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 2, application_name: process.env.BENCH_CLIENT_ID ?? 'bench-queue' });
    const kafka = createKafka({ brokers, clientId: 'bench-queue', logger: silentLogger() });
    const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
    await producer.connect();
    ran = armHere('raw', 'kafkajs');
    const worker = startPlainQueueWorker(
      pool,
      schema,
      async (jobs) => {
        const byTopic = new Map<string, Array<{ key: string | null; value: string | null }>>();
        for (const j of jobs) {
          const list = byTopic.get(j.topic) ?? [];
          list.push({ key: j.key, value: j.payload });
          byTopic.set(j.topic, list);
        }
        await producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })) });
        const t = now();
        timing.sends++;
        timing.ackedVia.kafkajs += jobs.length;
        for (const j of jobs) ack(Number(j.id), t);
      },
      {
        batchSize: 500,
        pollIntervalMs: 10,
        onError: (error) => {
          timing.batchErrors++;
          process.stderr.write(`bench queue worker: ${(error as Error)?.message ?? String(error)}\n`);
        },
      },
    );
    stop = async () => {
      await worker.stop();
      await producer.disconnect();
      await pool.end();
    };
  } else {
    throw new Error(`usage: child.mjs relay|consumer|reader|queue (got ${mode})`);
  }
  if (!ran) throw new Error(`bench child (${mode}): started, but announced nothing on its diagnostics channel`);
  process.stdout.write(`${JSON.stringify({ ready: true, t: now(), ran })}\n`);
  let stopping = false;
  process.on('SIGTERM', () => {
    if (stopping) return;
    stopping = true;
    void stop().finally(() => {
      clearTimeout(flushTimer);
      report();
      // maxRSS is in KiB: the process' true peak, including between two lines.
      peakRss = Math.max(peakRss, process.resourceUsage().maxRSS * 1024);
      process.stdout.write(`${JSON.stringify({ done: true, peakRss, timing })}\n`, () => process.exit(0));
    });
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`bench child (${mode}) failed: ${(error as Error)?.stack ?? String(error)}\n`);
  process.exit(1);
});
