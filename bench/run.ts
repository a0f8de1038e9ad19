/**
 * The benchmark suite (issue 7): one command, real servers, one run, one table.
 *
 *   npm run bench                 # full profile (~15 minutes on the 2-core machine)
 *   npm run bench -- --quick      # small sizes, for trying things (~4 minutes)
 *   npm run bench -- --only consumer,peer
 *
 * Sections: ceilings (raw kafkajs producer; raw Postgres claim-and-mark loop), relay drain
 * of a backlog, latency at a steady offered load, consumer throughput, scale (one relay vs
 * two; 10k vs 1M backlog; peak RSS), a peer (pg-transactional-outbox, polling), and the
 * cost to the application's writes (pgbench). Prints a table with the targets, writes
 * bench/results/<stamp>/results.json and SVG plots beside it.
 *
 * Relays and the latency run's consumer run in processes of their own (bench/child.ts,
 * bundled with esbuild) so that their RSS is their own and their event loop is not the
 * writers'. This machine is shared: every comparison is measured side by side in this run,
 * arms alternating where they repeat.
 */
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { Partitioners, type Message } from 'kafkajs';
import { createConsumer } from '../src/consumer/consumer.js';
import { getStatus } from '../src/commands/status.js';
import { HEADERS } from '../src/shared/kafka.js';
import { DATABASE_URL, benchSchema, brokers, createTopic, fillBacklog, kafka, percentile, produceAmountMessages } from './common.js';
import { lineChart, type Series } from './svg.js';

// ---------------------------------------------------------------------------------------
// Profile

const args = process.argv.slice(2);
const QUICK = args.includes('--quick');
const onlyArg = args.find((a) => a.startsWith('--only'));
const ONLY = onlyArg ? (onlyArg.includes('=') ? onlyArg.split('=')[1] : args[args.indexOf(onlyArg) + 1])?.split(',') : undefined;
const P = QUICK
  ? { drainRows: 20_000, latencySeconds: 6, consumerMessages: 10_000, consumerRounds: 1, scaleRows: 20_000, scaleRounds: 1, smallBacklog: 10_000, bigBacklog: 100_000, peerRows: 1_000, peerSeconds: 20, pgbenchSeconds: 5, pgbenchRounds: 1 }
  : { drainRows: 200_000, latencySeconds: 20, consumerMessages: 50_000, consumerRounds: 2, scaleRows: 100_000, scaleRounds: 2, smallBacklog: 10_000, bigBacklog: 1_000_000, peerRows: 5_000, peerSeconds: 60, pgbenchSeconds: 10, pgbenchRounds: 3 };
const KEYS = 10_000;
const BATCH = 500; // the relay's default batch size
const PARTITIONS = 6;
const PAYLOAD = JSON.stringify({ i: 0, pad: 'x'.repeat(150), type: 'order_updated' });

const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const outDir = fileURLToPath(new URL(`./results/${stamp}${QUICK ? '-quick' : ''}/`, import.meta.url));
mkdirSync(outDir, { recursive: true });
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 24 });
const results: Record<string, unknown> = { profile: QUICK ? 'quick' : 'full', sizes: P, startedAt: new Date().toISOString() };
const rows: Array<{ section: string; what: string; value: string; target?: string; met?: boolean | undefined; load1: number }> = [];
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const wall = (): number => performance.timeOrigin + performance.now();
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
const fmt = (n: number, digits = 0): string => (Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a');
function log(text: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${text}\n`);
}
function row(section: string, what: string, value: string, target?: string, met?: boolean): void {
  // The 1-minute load average when the result came in: this machine is shared.
  const load1 = Math.round(loadavg()[0]! * 10) / 10;
  rows.push({ section, what, value, target, met, load1 });
  log(`${section} | ${what}: ${value}${target ? ` (target ${target}: ${met ? 'met' : 'NOT met'})` : ''} [load ${load1}]`);
}
function want(section: string): boolean {
  return !ONLY || ONLY.includes(section);
}

// ---------------------------------------------------------------------------------------
// Child processes (relay, consumer)

const BUILD_DIR = fileURLToPath(new URL('../.cache/bench-build/', import.meta.url));
const CHILD = join(BUILD_DIR, 'bench', 'child.mjs');

/** Bundle bench/child.ts (and the code under test) into one plain JS file. */
function buildChild(): void {
  const root = fileURLToPath(new URL('../', import.meta.url));
  execFileSync(
    join(root, 'node_modules/.bin/esbuild'),
    ['bench/child.ts', '--bundle', '--platform=node', '--format=esm', '--target=node20', '--packages=external', `--outfile=${CHILD}`, '--log-level=warning'],
    { cwd: root, stdio: 'inherit' },
  );
  // src/migrate.ts finds sql/ relative to itself: one level up from the bundle.
  cpSync(join(root, 'sql'), join(BUILD_DIR, 'sql'), { recursive: true });
}

interface Child {
  process: ChildProcess;
  /** [outbox id, wall ms] per acknowledged (relay) or handled (consumer) message. */
  acks: Array<[number, number]>;
  rss: Array<[number, number]>;
  peakRss: number;
  timing?: { sendMs: number; sends: number; batchMs: number; batches: number };
  ready: Promise<void>;
  stop(): Promise<void>;
}

function startChild(mode: 'relay' | 'consumer', env: Record<string, string>): Child {
  const proc = spawn(process.execPath, [CHILD, mode], {
    env: { ...process.env, DATABASE_URL, KAFKA_BROKERS: brokers().join(','), NODE_PATH: fileURLToPath(new URL('../node_modules', import.meta.url)), ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const child: Child = {
    process: proc,
    acks: [],
    rss: [],
    peakRss: 0,
    ready: undefined as unknown as Promise<void>,
    stop: async () => {
      if (proc.exitCode !== null) return;
      // 'close': after its stdout is read to the end (its last line carries the totals).
      const exited = new Promise((r) => proc.once('close', r));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
  child.ready = new Promise((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`bench child ${mode} exited with ${code} before it was ready`)));
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      let msg: { ready?: boolean; t?: number; rss?: number; acks?: Array<[number, number]>; done?: boolean; peakRss?: number; timing?: Child['timing'] };
      try {
        msg = JSON.parse(line);
      } catch {
        return; // a log line
      }
      if (msg.ready) resolve();
      if (msg.acks) for (const a of msg.acks) child.acks.push(a);
      if (msg.rss !== undefined && msg.t !== undefined) {
        child.rss.push([msg.t, msg.rss]);
        child.peakRss = Math.max(child.peakRss, msg.rss);
      }
      if (msg.peakRss) child.peakRss = Math.max(child.peakRss, msg.peakRss);
      if (msg.timing) child.timing = msg.timing;
    });
  });
  return child;
}

async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs: number, everyMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Rows/s from the first batch acknowledged to the last, and the per-second series. */
function drainRate(acks: Array<[number, number]>, rowsExpected: number): { rowsPerSecond: number; seconds: number; series: Array<[number, number]> } {
  const times = acks.map((a) => a[1]).sort((a, b) => a - b);
  if (times.length < rowsExpected) throw new Error(`only ${times.length} of ${rowsExpected} rows acknowledged`);
  const first = times[0]!;
  const last = times[times.length - 1]!;
  // The first batch's own duration is not in [first, last]: count the rows after the
  // first acknowledgement over the time after it.
  const afterFirst = times.filter((t) => t > first).length;
  const seconds = (last - first) / 1000;
  const bins = new Map<number, number>();
  for (const t of times) {
    const bin = Math.floor((t - first) / 500);
    bins.set(bin, (bins.get(bin) ?? 0) + 1);
  }
  const series: Array<[number, number]> = [];
  for (let b = 0; b <= Math.floor((last - first) / 500); b++) series.push([b / 2, (bins.get(b) ?? 0) * 2]);
  return { rowsPerSecond: seconds > 0 ? afterFirst / seconds : NaN, seconds, series };
}

async function unsent(schema: string): Promise<boolean> {
  const { rows: r } = await pool.query<{ any: boolean }>(`SELECT EXISTS (SELECT 1 FROM "${schema}".outbox WHERE sent_at IS NULL) AS any`);
  return r[0]!.any;
}

/** A relay child draining a backlog filled before it starts. */
async function relayDrain(
  backlog: number,
  label: string,
  relayOptions: Record<string, unknown> = {},
): Promise<{ rowsPerSecond: number; peakRss: number; series: Array<[number, number]>; rss: Array<[number, number]>; sendShare: number; batches: number }> {
  const { schema, drop } = await benchSchema(pool, 'benchdrain');
  try {
    const topic = await createTopic(PARTITIONS);
    log(`${label}: filling a ${fmt(backlog)}-row backlog`);
    await fillBacklog(pool, schema, topic, backlog, KEYS);
    const relay = startChild('relay', { BENCH_SCHEMA: schema, BENCH_RELAY_OPTIONS: JSON.stringify(relayOptions) });
    try {
      await relay.ready;
      await until(`${label} drained`, () => relay.acks.length >= backlog, 1_800_000, 200);
      await sleep(300); // the last RSS sample
    } finally {
      await relay.stop();
    }
    const rate = drainRate(relay.acks, backlog);
    const t0 = relay.acks.reduce((m, a) => Math.min(m, a[1]), Infinity);
    const timing = relay.timing ?? { sendMs: NaN, sends: 0, batchMs: NaN, batches: 0 };
    return {
      rowsPerSecond: rate.rowsPerSecond,
      peakRss: relay.peakRss,
      series: rate.series,
      rss: relay.rss.map(([t, r]) => [(t - t0) / 1000, r / 2 ** 20]),
      // Of the time batches were in flight, the share spent waiting for Kafka.
      sendShare: timing.sendMs / timing.batchMs,
      batches: timing.batches,
    };
  } finally {
    await drop();
  }
}

// ---------------------------------------------------------------------------------------
// 1. Ceilings

function kafkaMessages(n: number, offset = 0): Message[] {
  return Array.from({ length: n }, (_, j) => ({
    key: `key-${(offset + j) % KEYS}`,
    value: PAYLOAD,
    headers: { [HEADERS.messageId]: randomUUID(), [HEADERS.outboxId]: String(offset + j), [HEADERS.contentType]: 'application/json' },
  }));
}

/** Raw kafkajs producer: same messages, batches of BATCH, acks=all, 2 sends in flight (as the relay). */
async function kafkaCeiling(total: number): Promise<number> {
  const topic = await createTopic(PARTITIONS);
  const producer = kafka().producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const batches: Message[][] = [];
  for (let i = 0; i < total; i += BATCH) batches.push(kafkaMessages(Math.min(BATCH, total - i), i));
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

/**
 * Raw Postgres claim-and-mark: two loops (as the relay's two batches in flight) on disjoint
 * halves of the shards, each BEGIN; SELECT ... FOR UPDATE SKIP LOCKED LIMIT 500; UPDATE
 * sent_at; COMMIT, with synchronous_commit off as the relay has it. No Kafka.
 */
async function postgresCeiling(total: number): Promise<number> {
  const { schema, drop } = await benchSchema(pool, 'benchceil');
  try {
    const topic = await createTopic(1);
    await fillBacklog(pool, schema, topic, total, KEYS);
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

// ---------------------------------------------------------------------------------------
// 3. Latency at a steady offered load

interface LatencyResult {
  offered: number;
  withConsumer: boolean;
  achieved: number;
  rows: number;
  ack: { p50: number; p95: number; p99: number; max: number };
  handler: { p50: number; p95: number; p99: number; max: number };
  ackSorted: number[];
  handlerSorted: number[];
}

async function latencyAt(rate: number, seconds: number, withConsumer: boolean): Promise<LatencyResult> {
  const { schema, drop } = await benchSchema(pool, 'benchlat');
  const topic = await createTopic(PARTITIONS);
  await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, entity text NOT NULL, amount integer NOT NULL)`);
  const relay = startChild('relay', { BENCH_SCHEMA: schema });
  const consumer = withConsumer
    ? startChild('consumer', { BENCH_SCHEMA: schema, BENCH_TOPIC: topic, BENCH_GROUP: `bench-lat-${randomUUID()}`, BENCH_PARTITIONS: String(PARTITIONS) })
    : { ready: Promise.resolve(), acks: [] as Array<[number, number]>, stop: async () => undefined };
  try {
    await Promise.all([relay.ready, consumer.ready]);
    // A first row through the whole path: the consumer has joined and is fetching.
    await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
    await until('the warm-up row through', () => (withConsumer ? consumer : relay).acks.length > 0, 60_000);
    // The writers: pgbench (C, so the load generator takes little of the 2 cores), 8
    // clients, a Poisson schedule at the offered rate. Each row is one autocommit INSERT that
    // stamps created_at with clock_timestamp(): the commit follows within a fraction of a
    // millisecond, so latencies measured from it are, if anything, slightly long.
    const before = new Set((await pool.query<{ id: string }>(`SELECT id FROM "${schema}".outbox`)).rows.map((r) => Number(r.id)));
    const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`;
    const out = await pgbench(script, ['-c', '8', '-j', '2', '-R', String(rate), '-T', String(seconds)]);
    const achieved = Number(/tps = ([\d.]+)/.exec(out)?.[1] ?? NaN);
    const { rows: written } = await pool.query<{ id: string; t: number }>(`SELECT id, extract(epoch FROM created_at) * 1000 AS t FROM "${schema}".outbox`);
    const committed = new Map<number, number>();
    for (const r of written) if (!before.has(Number(r.id))) committed.set(Number(r.id), Number(r.t));
    const total = committed.size;
    await until('every row acknowledged and handled', () => {
      const seen = new Set((withConsumer ? consumer : relay).acks.map((a) => a[0]));
      return [...committed.keys()].every((id) => seen.has(id));
    }, 300_000, 250);
    const firstAck = new Map<number, number>();
    for (const [id, t] of relay.acks) if (!firstAck.has(id)) firstAck.set(id, t);
    const firstHandled = new Map<number, number>();
    for (const [id, t] of consumer.acks) if (!firstHandled.has(id)) firstHandled.set(id, t);
    const ack: number[] = [];
    const handler: number[] = [];
    for (const [id, t] of committed) {
      const a = firstAck.get(id);
      const h = firstHandled.get(id);
      if (a !== undefined) ack.push(Math.max(0, a - t));
      if (h !== undefined) handler.push(Math.max(0, h - t));
    }
    ack.sort((a, b) => a - b);
    handler.sort((a, b) => a - b);
    const stats = (xs: number[]) => ({ p50: percentile(xs, 50), p95: percentile(xs, 95), p99: percentile(xs, 99), max: xs[xs.length - 1] ?? NaN });
    return { offered: rate, withConsumer, achieved, rows: total, ack: stats(ack), handler: stats(handler), ackSorted: ack, handlerSorted: handler };
  } finally {
    await Promise.all([relay.stop(), consumer.stop()]);
    await drop();
  }
}

// ---------------------------------------------------------------------------------------
// 4. Consumer

async function consumerBench(): Promise<{ raw: number[]; ours: number[]; oldDefault: number[] }> {
  const total = P.consumerMessages;
  const partitions = 4;
  const { schema, drop } = await benchSchema(pool, 'benchcons');
  await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, entity text NOT NULL, amount integer NOT NULL)`);
  const topic = await createTopic(partitions);
  await produceAmountMessages(kafka(), topic, total);

  const raw = async (): Promise<number> => {
    const consumer = kafka().consumer({ groupId: `bench-raw-${randomUUID()}`, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    let seen = 0;
    let first = 0;
    let last = 0;
    await new Promise<void>((resolve) => {
      void consumer.run({
        partitionsConsumedConcurrently: partitions,
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
    await consumer.disconnect();
    return (total * 1000) / (last - first);
  };

  const ours = async (options: { savepoints: 'on-failure' | 'always'; messagesPerTransaction?: number }): Promise<number> => {
    await pool.query(`TRUNCATE "${schema}".effects`);
    let first = 0;
    let last = 0;
    let resolveDone!: () => void;
    const done = new Promise<void>((r) => (resolveDone = r));
    const effect = `INSERT INTO "${schema}".effects (message_id, entity, amount) VALUES ($1, $2, $3)`;
    const consumer = createConsumer<{ amount: number }>({
      kafka: kafka(),
      groupId: `bench-ours-${randomUUID()}`,
      topics: topic,
      pool,
      schema,
      partitionsConcurrency: partitions,
      maxWaitTimeMs: 100,
      ...options,
      handler: async (message, { client }) => {
        if (first === 0) first = wall();
        await client.query(effect, [message.messageId, message.key, message.value.amount]);
      },
    });
    consumer.on('offsetCommitted', () => {
      if (consumer.stats().processed >= total && last === 0) {
        last = wall();
        resolveDone();
      }
    });
    await consumer.start();
    await done;
    await consumer.stop();
    const { rows: r } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".effects`);
    if (r[0]!.n !== total) throw new Error(`consumer bench: ${r[0]!.n} effects for ${total} messages`);
    return (total * 1000) / (last - first);
  };

  const out = { raw: [] as number[], ours: [] as number[], oldDefault: [] as number[] };
  try {
    for (let round = 0; round < P.consumerRounds; round++) {
      out.raw.push(await raw());
      out.ours.push(await ours({ savepoints: 'on-failure' }));
      out.oldDefault.push(await ours({ savepoints: 'always', messagesPerTransaction: 50 }));
      log(`consumer round ${round + 1}: raw ${fmt(out.raw.at(-1)!)}, ours ${fmt(out.ours.at(-1)!)}, savepoint per message (before) ${fmt(out.oldDefault.at(-1)!)} msg/s`);
    }
  } finally {
    await drop();
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// 5. Scale: one relay vs two

async function relaysDrain(relays: number, total: number): Promise<number> {
  const { schema, drop } = await benchSchema(pool, 'benchscale');
  const topic = await createTopic(PARTITIONS);
  const children = Array.from({ length: relays }, () => startChild('relay', { BENCH_SCHEMA: schema, BENCH_RELAY_OPTIONS: JSON.stringify({ leaseTtlMs: 3000 }) }));
  try {
    await Promise.all(children.map((c) => c.ready));
    await until(
      'relays to settle their shards',
      async () => {
        const s = await getStatus({ client: pool as never, schema });
        const counts = s.relays.filter((r) => r.live).map((r) => r.shardCount);
        return counts.length === relays && counts.every((c) => c === 256 / relays);
      },
      60_000,
    );
    // One transaction: the backlog becomes visible at once; the clock runs from its commit.
    const client = await pool.connect();
    await client.query('BEGIN');
    await fillBacklog(client as unknown as pg.Pool, schema, topic, total, KEYS, false);
    await client.query('COMMIT');
    client.release();
    const started = wall();
    await until('the backlog drained', async () => !(await unsent(schema)), 1_800_000, 100);
    return total / ((wall() - started) / 1000);
  } finally {
    await Promise.all(children.map((c) => c.stop()));
    await drop();
  }
}

// ---------------------------------------------------------------------------------------
// 6. The peer: pg-transactional-outbox, polling, publishing to the same broker

async function peer(batchSize: number, total: number): Promise<{ rowsPerSecond: number; done: number; abandoned: number; seconds: number; finished: boolean }> {
  const lib = await import('pg-transactional-outbox');
  const schema = `benchpeer_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6)}`;
  const setup = { outboxOrInbox: 'outbox' as const, database: new URL(DATABASE_URL).pathname.slice(1), schema, table: 'outbox', listenerRole: 'postgres', nextMessagesSchema: schema, nextMessagesName: 'next_outbox_messages' };
  const client = await pool.connect();
  try {
    // Its setup drops indexes by unqualified name: keep it inside its own schema.
    await client.query(`CREATE SCHEMA "${schema}"`);
    await client.query(`SET search_path = "${schema}"`);
    await client.query(lib.DatabaseSetup.dropAndCreateTable(setup));
    await client.query(lib.DatabaseSetup.createPollingFunction(setup));
    await client.query(lib.DatabaseSetup.setupPollingIndexes(setup));
    await client.query('RESET search_path');
    await client.query(
      `INSERT INTO "${schema}".outbox (id, aggregate_type, aggregate_id, message_type, segment, payload, created_at)
       SELECT gen_random_uuid(), 'order', 'key-' || (i % $1), 'order_updated', 'key-' || (i % $1),
              jsonb_build_object('i', i, 'type', 'order_updated', 'pad', repeat('x', 150)), clock_timestamp()
         FROM generate_series(0, $2 - 1) AS i`,
      [KEYS, total],
    );
    await client.query(`VACUUM ANALYZE "${schema}".outbox`);
  } finally {
    client.release();
  }
  const topic = await createTopic(PARTITIONS);
  const producer = kafka().producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const url = new URL(DATABASE_URL);
  const [shutdown] = lib.initializePollingMessageListener(
    {
      outboxOrInbox: 'outbox',
      dbListenerConfig: { host: url.hostname, port: Number(url.port || 5432), user: url.username || 'postgres', database: url.pathname.slice(1) },
      settings: {
        dbSchema: schema,
        dbTable: 'outbox',
        enableMaxAttemptsProtection: false,
        enablePoisonousMessageProtection: false,
        nextMessagesFunctionSchema: schema,
        nextMessagesFunctionName: 'next_outbox_messages',
        nextMessagesBatchSize: batchSize,
      },
    },
    {
      // Its documented extension point: the message publisher, here one kafkajs send per
      // message with acks=all (the library hands over one message at a time).
      handle: async (message) => {
        await producer.send({
          topic,
          acks: -1,
          messages: [{ key: message.segment ?? message.aggregateId, value: JSON.stringify(message.payload), headers: { [HEADERS.messageId]: message.id } }],
        });
      },
    },
    lib.getDisabledLogger(),
  );
  const started = wall();
  let done = 0;
  let abandoned = 0;
  try {
    for (;;) {
      await sleep(1_000);
      const { rows: r } = await pool.query<{ done: number; abandoned: number }>(
        `SELECT count(*) FILTER (WHERE processed_at IS NOT NULL)::int AS done, count(*) FILTER (WHERE abandoned_at IS NOT NULL)::int AS abandoned FROM "${schema}".outbox`,
      );
      done = r[0]!.done;
      abandoned = r[0]!.abandoned;
      if (done + abandoned >= total || wall() - started > P.peerSeconds * 1000) break;
    }
  } finally {
    await shutdown();
    await producer.disconnect();
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  }
  const seconds = (wall() - started) / 1000;
  return { rowsPerSecond: done / seconds, done, abandoned, seconds, finished: done + abandoned >= total };
}

// ---------------------------------------------------------------------------------------
// 7. Cost to the application's writes

/** Run pgbench with a custom script; resolves with its output (async: the children's pipes keep flowing). */
async function pgbench(script: string, options: string[]): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-'));
  const file = join(dir, 'script.sql');
  writeFileSync(file, script);
  const url = new URL(DATABASE_URL);
  const proc = spawn('pgbench', ['-n', ...options, '-f', file, '-h', url.hostname, '-p', url.port || '5432', '-U', url.username || 'postgres', url.pathname.slice(1)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const code = await new Promise<number | null>((r) => proc.on('exit', r));
  if (code !== 0) throw new Error(`pgbench exited with ${code}:\n${out}`);
  return out;
}

/** Commits/s of 4 pgbench writers, each transaction inserting one row into `table`. */
async function insertTps(schema: string, table: string, topic: string, seconds: number): Promise<number> {
  const script = `\\set k random(1, ${KEYS})\nBEGIN;\nINSERT INTO "${schema}".${table} (topic, key, payload) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}');\nCOMMIT;\n`;
  const out = await pgbench(script, ['-c', '4', '-j', '2', '-T', String(seconds)]);
  const m = /tps = ([\d.]+)/.exec(out);
  if (!m) throw new Error(`pgbench output not understood:\n${out}`);
  return Number(m[1]);
}

async function writeCost(): Promise<{ plain: number[]; polling: number[]; relaying: number[]; relayedRows: number[]; insertedRows: number[] }> {
  const { schema, drop } = await benchSchema(pool, 'benchcost');
  const idle = await benchSchema(pool, 'benchidle');
  const topic = await createTopic(PARTITIONS);
  // The plain table: the outbox's columns, defaults and indexes, and no relay on it.
  await pool.query(`CREATE TABLE "${schema}".plain (LIKE "${schema}".outbox INCLUDING ALL)`);
  const out = { plain: [] as number[], polling: [] as number[], relaying: [] as number[], relayedRows: [] as number[], insertedRows: [] as number[] };
  const reset = async (): Promise<void> => {
    await pool.query(`UPDATE "${schema}".outbox SET sent_at = now() WHERE sent_at IS NULL`);
    await pool.query(`TRUNCATE "${schema}".plain`);
    await pool.query(`VACUUM "${schema}".outbox`);
  };
  const withRelay = async (relaySchema: string, body: () => Promise<number>): Promise<number> => {
    const relay = startChild('relay', { BENCH_SCHEMA: relaySchema });
    try {
      await relay.ready;
      await sleep(1_000); // leases taken, polling
      const before = Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outbox`)).rows[0]!.n);
      const acked = relay.acks.length;
      const tps = await body();
      if (relaySchema === schema) {
        // Proof that this arm relayed: rows acknowledged by Kafka while pgbench ran.
        out.relayedRows.push(relay.acks.length - acked);
        out.insertedRows.push(Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outbox`)).rows[0]!.n) - before);
      }
      return tps;
    } finally {
      await relay.stop();
    }
  };
  try {
    for (let round = 0; round < P.pgbenchRounds; round++) {
      out.plain.push(await insertTps(schema, 'plain', topic, P.pgbenchSeconds));
      await reset();
      out.polling.push(await withRelay(idle.schema, () => insertTps(schema, 'outbox', topic, P.pgbenchSeconds)));
      await reset();
      out.relaying.push(await withRelay(schema, () => insertTps(schema, 'outbox', topic, P.pgbenchSeconds)));
      await reset();
      log(`pgbench round ${round + 1}: plain ${fmt(out.plain.at(-1)!)}, relay polling ${fmt(out.polling.at(-1)!)}, relay relaying ${fmt(out.relaying.at(-1)!)} tps`);
    }
  } finally {
    await drop();
    await idle.drop();
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Run

function percentileSeries(sorted: number[]): Array<[number, number]> {
  const points: Array<[number, number]> = [];
  for (let p = 0; p <= 99.9; p += p < 90 ? 1 : 0.1) points.push([p, percentile(sorted, p)]);
  return points;
}

function plot(file: string, svg: string): void {
  writeFileSync(join(outDir, file), svg);
}

async function main(): Promise<void> {
  log(`profile ${QUICK ? 'quick' : 'full'}; results in ${outDir}`);
  buildChild();
  const { rows: v } = await pool.query<{ v: string }>('SELECT current_setting($$server_version$$) AS v');
  results.machine = { cpus: cpus().length, cpuModel: cpus()[0]?.model, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version, postgres: v[0]?.v, kafkaBrokers: brokers() };
  let ceilingKafka = NaN;

  if (want('ceilings') || want('drain')) {
    log('1. ceilings');
    ceilingKafka = await kafkaCeiling(P.drainRows);
    const ceilingPg = await postgresCeiling(P.drainRows);
    results.ceilings = { kafkaProducer: ceilingKafka, postgresClaimAndMark: ceilingPg };
    row('1. ceilings', `raw kafkajs producer, batch ${BATCH}, acks=all, 2 in flight (ceiling 1)`, `${fmt(ceilingKafka)} rows/s`);
    row('1. ceilings', `raw Postgres claim-and-mark loop, batch ${BATCH}, 2 loops (ceiling 2)`, `${fmt(ceilingPg)} rows/s`);
  }

  if (want('drain')) {
    log('2. relay drain');
    const d = await relayDrain(P.drainRows, 'drain');
    results.drain = { rows: P.drainRows, rowsPerSecond: d.rowsPerSecond, sendShare: d.sendShare, batches: d.batches, peakRss: d.peakRss };
    row('2. drain', `relay, ${fmt(P.drainRows)}-row backlog, defaults`, `${fmt(d.rowsPerSecond)} rows/s`, '≥ 20,000', d.rowsPerSecond >= 20_000);
    row('2. drain', 'relay / ceiling 1', `${fmt(d.rowsPerSecond / ceilingKafka, 2)}`, '≥ 0.6', d.rowsPerSecond / ceilingKafka >= 0.6);
    row('2. drain', 'share of batch time spent waiting for Kafka', `${fmt(d.sendShare * 100)} % (${fmt(d.batches)} batches)`);
    const big = await relayDrain(P.drainRows, 'drain, batch 1000', { batchSize: 1000 });
    results.drainBatch1000 = { rowsPerSecond: big.rowsPerSecond, sendShare: big.sendShare };
    row('2. drain', 'relay, batch 1000 (a setting, for comparison)', `${fmt(big.rowsPerSecond)} rows/s, ${fmt(big.rowsPerSecond / ceilingKafka, 2)} × ceiling 1`);
    plot('drain-throughput.svg', lineChart({ title: `Relay drain of a ${fmt(P.drainRows)}-row backlog`, xLabel: 'seconds since the first acknowledged batch', yLabel: 'rows/s (0.5 s bins)', series: [{ name: 'relay, defaults', points: d.series }] }));
  }

  if (want('latency')) {
    log('3. latency');
    const lat: LatencyResult[] = [];
    const f = (x: { p50: number; p95: number; p99: number }): string => `p50 ${fmt(x.p50, 1)} / p95 ${fmt(x.p95, 1)} / p99 ${fmt(x.p99, 1)} ms`;
    // The relay alone first (as deployed with the consumer on another server), then with our
    // consumer on this same Postgres: its transactions hold the relay's horizon back.
    for (const [rate, withConsumer] of [[1_000, false], [1_000, true], [5_000, true]] as const) {
      const r = await latencyAt(rate, P.latencySeconds, withConsumer);
      lat.push(r);
      const where = withConsumer ? 'with the consumer on the same Postgres' : 'relay alone';
      row('3. latency', `${fmt(rate)} rows/s offered (${fmt(r.achieved)} achieved), ${where}: commit → Kafka ack`, f(r.ack), rate === 1_000 ? 'p99 ≤ 25 ms' : undefined, rate === 1_000 ? r.ack.p99 <= 25 : undefined);
      if (withConsumer) row('3. latency', `${fmt(rate)} rows/s offered, commit → consumer handler`, f(r.handler));
    }
    results.latency = lat.map(({ ackSorted: _a, handlerSorted: _h, ...rest }) => rest);
    const series: Series[] = lat.flatMap((r) => [
      { name: `${fmt(r.offered)}/s commit → ack${r.withConsumer ? '' : ' (relay alone)'}`, points: percentileSeries(r.ackSorted) },
      ...(r.withConsumer ? [{ name: `${fmt(r.offered)}/s commit → handler`, points: percentileSeries(r.handlerSorted) }] : []),
    ]);
    plot('latency-percentiles.svg', lineChart({ title: 'Latency distribution at a steady offered load', xLabel: 'percentile', yLabel: 'ms', series }));
  }

  if (want('consumer')) {
    log('4. consumer');
    const c = await consumerBench();
    results.consumer = c;
    const ours = mean(c.ours);
    row('4. consumer', 'raw kafkajs consumer (eachBatch, JSON.parse, no database)', `${fmt(mean(c.raw))} msg/s`);
    row('4. consumer', 'consumer, dedup + one-row effect (defaults: 100/transaction, savepoints on failure)', `${fmt(ours)} msg/s`, '≥ 15,000', ours >= 15_000);
    row('4. consumer', 'consumer / raw kafkajs', fmt(ours / mean(c.raw), 3));
    row('4. consumer', 'before: a savepoint per message, 50/transaction', `${fmt(mean(c.oldDefault))} msg/s (now ${fmt(ours / mean(c.oldDefault), 2)} ×)`);
  }

  if (want('scale')) {
    log('5. scale');
    const one: number[] = [];
    const two: number[] = [];
    for (let round = 0; round < P.scaleRounds; round++) {
      one.push(await relaysDrain(1, P.scaleRows));
      two.push(await relaysDrain(2, P.scaleRows));
      log(`scale round ${round + 1}: one relay ${fmt(one.at(-1)!)}, two ${fmt(two.at(-1)!)} rows/s`);
    }
    row('5. scale', `one relay, ${fmt(P.scaleRows)} rows committed at once`, `${fmt(mean(one))} rows/s`);
    row('5. scale', 'two relays', `${fmt(mean(two))} rows/s`);
    row('5. scale', 'two / one', fmt(mean(two) / mean(one), 2), '≥ 1.0', mean(two) / mean(one) >= 1.0);
    const small = await relayDrain(P.smallBacklog, 'small backlog');
    const big = await relayDrain(P.bigBacklog, 'big backlog');
    results.scale = { one, two, small: { backlog: P.smallBacklog, rowsPerSecond: small.rowsPerSecond, peakRss: small.peakRss }, big: { backlog: P.bigBacklog, rowsPerSecond: big.rowsPerSecond, peakRss: big.peakRss } };
    row('5. scale', `drain, ${fmt(P.smallBacklog)}-row backlog`, `${fmt(small.rowsPerSecond)} rows/s`);
    row('5. scale', `drain, ${fmt(P.bigBacklog)}-row backlog`, `${fmt(big.rowsPerSecond)} rows/s`);
    row('5. scale', 'big / small backlog', fmt(big.rowsPerSecond / small.rowsPerSecond, 2), '≥ 0.9', big.rowsPerSecond / small.rowsPerSecond >= 0.9);
    const mib = (b: number): number => b / 2 ** 20;
    row('5. scale', `relay peak RSS, ${fmt(P.smallBacklog)} / ${fmt(P.bigBacklog)} backlog`, `${fmt(mib(small.peakRss))} / ${fmt(mib(big.peakRss))} MiB`, '≤ 150 MB, flat', big.peakRss <= 150e6 && big.peakRss <= small.peakRss * 1.2);
    plot('backlog-throughput.svg', lineChart({ title: 'Relay drain: throughput over time', xLabel: 'seconds since the first acknowledged batch', yLabel: 'rows/s (0.5 s bins)', series: [{ name: `${fmt(P.bigBacklog)}-row backlog`, points: big.series }, { name: `${fmt(P.smallBacklog)}-row backlog`, points: small.series }] }));
    plot('backlog-rss.svg', lineChart({ title: `Relay RSS while draining a ${fmt(P.bigBacklog)}-row backlog`, xLabel: 'seconds since the first acknowledged batch', yLabel: 'RSS (MiB)', series: [{ name: 'relay process RSS', points: big.rss }] }));
  }

  if (want('peer')) {
    log('6. peer');
    const ourOnSame = await relayDrain(P.peerRows, 'peer workload, ours');
    const peerDefault = await peer(5, P.peerRows);
    const peer50 = await peer(50, P.peerRows);
    results.peer = { rows: P.peerRows, ours: ourOnSame.rowsPerSecond, batch5: peerDefault, batch50: peer50 };
    const describe = (r: typeof peerDefault): string =>
      `${fmt(r.rowsPerSecond)} rows/s (${fmt(r.done)} of ${fmt(P.peerRows)} sent in ${fmt(r.seconds)} s${r.finished ? '' : ', cut off'}, ${fmt(r.abandoned)} abandoned)`;
    row('6. peer', `pg-transactional-outbox 0.5.7, polling, batch 5 (default), ${fmt(P.peerRows)}-row backlog`, describe(peerDefault));
    row('6. peer', 'pg-transactional-outbox, batch 50', describe(peer50));
    row('6. peer', 'outbox-relay, same backlog', `${fmt(ourOnSame.rowsPerSecond)} rows/s`);
    const best = Math.max(peerDefault.rowsPerSecond, peer50.rowsPerSecond);
    row('6. peer', 'ours / the peer (its better setting)', fmt(ourOnSame.rowsPerSecond / best, 1), '≥ 20 ×', ourOnSame.rowsPerSecond / best >= 20);
  }

  if (want('cost')) {
    log('7. cost to the application');
    const c = await writeCost();
    results.cost = c;
    row('7. cost', `pgbench 4 writers, plain table, no relay (${P.pgbenchRounds} × ${P.pgbenchSeconds} s, alternating)`, `${fmt(mean(c.plain))} tps`);
    row('7. cost', 'outbox, relay polling another schema (the wake-up alone)', `${fmt(mean(c.polling))} tps, ${fmt(mean(c.polling) / mean(c.plain), 2)} ×`);
    const relayed = c.relayedRows.reduce((a, b) => a + b, 0);
    const inserted = c.insertedRows.reduce((a, b) => a + b, 0);
    row('7. cost', `outbox, relay relaying every row (${fmt(relayed)} of ${fmt(inserted)} rows acknowledged by Kafka during the runs)`, `${fmt(mean(c.relaying))} tps, ${fmt(mean(c.relaying) / mean(c.plain), 2)} ×`, '≥ 0.95 ×', mean(c.relaying) / mean(c.plain) >= 0.95);
  }

  results.finishedAt = new Date().toISOString();
  results.table = rows;
  writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
  const lines = ['', `outbox-relay benchmark, ${results.profile} profile, ${String(results.startedAt)} (${cpus().length} cores, Postgres ${v[0]?.v}, Kafka ${brokers().join(',')})`, ''];
  lines.push('| section | what | result | target | met | load |', '|---|---|---|---|---|---:|');
  for (const r of rows) lines.push(`| ${r.section} | ${r.what} | ${r.value} | ${r.target ?? ''} | ${r.target ? (r.met ? 'yes' : '**no**') : ''} | ${r.load1} |`);
  lines.push('', `JSON and plots: ${outDir}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

try {
  await main();
} finally {
  await pool.end();
}
