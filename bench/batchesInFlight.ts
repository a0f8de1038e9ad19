/**
 * A measurement for issue 21 (steady load): what one batch in flight costs and saves
 * against the default two, side by side in one run, arms alternating round by round.
 *
 *   scripts/with-kafka.sh tsx bench/batchesInFlight.ts [--steady-rounds N] [--drain-rounds N]
 *
 * - steady: pgbench offering 1,000 rows/s (8 clients, Poisson arrivals) for 20 s after a
 *   5 s warm-up, the relay as its own process; CPU-seconds per 100,000 rows of the relay
 *   process, its Postgres backends and the broker (from /proc), commit → ack percentiles.
 *   A first round, not counted, warms the broker.
 * - drain: a committed, vacuumed 100,000-row backlog; rows/s from the first acknowledged
 *   batch to the last, and CPU per row as above.
 *
 * Prints each arm's line and the medians; not part of `npm run bench` (it sizes a lever,
 * see docs/benchmarks.md History), and writes nothing.
 */
import pg from 'pg';
import { withRelay } from './children.js';
import { DATABASE_URL, KEYS, PARTITIONS, PAYLOAD, benchSchema, createTopic, fillBacklog } from './common.js';
import { CpuMeter, backendPids, brokerPid } from './procCpu.js';
import { pgbench, tps } from './pgbench.js';
import { fmt, log, medianOf, percentiles, until } from './util.js';
import { ackLatencies, committedSince, maxId } from './sections/relayCost.js';

const RATE = 1_000;
const STEADY_SECONDS = 20;
const DRAIN_ROWS = 100_000;
const ARMS: Array<[string, Record<string, unknown>]> = [
  ['2 in flight (default)', {}],
  ['1 in flight', { batchesInFlight: 1 }],
];

interface Figures {
  rowsPerSecond: number;
  relay: number;
  backends: number;
  broker: number;
  p50?: number;
  p99?: number;
}

function meters(pool: pg.Pool, clientId: string, relayPid: () => number | undefined) {
  const broker = brokerPid();
  const all = [
    new CpuMeter(async () => { const p = relayPid(); return p ? [p] : []; }),
    new CpuMeter(() => backendPids(pool, clientId)),
    new CpuMeter(async () => (broker ? [broker] : [])),
  ];
  return {
    start: () => Promise.all(all.map((m) => m.start())),
    stop: async (): Promise<[number, number, number]> => {
      const [relay, backends, broker] = await Promise.all(all.map((m) => m.stop()));
      return [relay!, backends!, broker!];
    },
  };
}

async function steady(pool: pg.Pool, options: Record<string, unknown>): Promise<Figures> {
  const { schema, drop } = await benchSchema(pool, 'inflightsteady');
  const clientId = 'bench-inflight-steady';
  try {
    const topic = await createTopic(PARTITIONS);
    return await withRelay(schema, async (relay) => {
      const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`;
      await pgbench(script, ['-c', '8', '-j', '2', '-R', String(RATE), '-T', '5']);
      const before = await maxId(pool, schema);
      await until('steady: the warm-up through', () => new Set(relay.acks.map((a) => a[0])).size >= before, 60_000, 10);
      const m = meters(pool, clientId, () => relay.process.pid);
      await m.start();
      const achieved = tps(await pgbench(script, ['-c', '8', '-j', '2', '-R', String(RATE), '-T', String(STEADY_SECONDS)]));
      const committed = await committedSince(pool, schema, before);
      await until('steady: every row acknowledged', () => { const seen = new Set(relay.acks.map((a) => a[0])); return [...committed.keys()].every((id) => seen.has(id)); }, 300_000, 50);
      const [relayCpu, backendsCpu, brokerCpu] = await m.stop();
      const p = percentiles(ackLatencies(committed, relay.acks));
      const per = 100_000 / committed.size;
      return { rowsPerSecond: achieved, relay: relayCpu * per, backends: backendsCpu * per, broker: brokerCpu * per, p50: p.p50, p99: p.p99 };
    }, { clientId, ...options });
  } finally {
    await drop();
  }
}

async function drain(pool: pg.Pool, options: Record<string, unknown>): Promise<Figures> {
  const { schema, drop } = await benchSchema(pool, 'inflightdrain');
  const clientId = 'bench-inflight-drain';
  try {
    const topic = await createTopic(PARTITIONS);
    await fillBacklog(pool, schema, topic, DRAIN_ROWS, KEYS, true);
    return await withRelay(schema, async (relay) => {
      await until('drain: first batch', () => relay.acks.length > 0, 600_000, 10);
      const before = relay.acks.length;
      const m = meters(pool, clientId, () => relay.process.pid);
      await m.start();
      await until('drain: drained', () => relay.acks.length >= DRAIN_ROWS, 1_800_000, 50);
      const [relayCpu, backendsCpu, brokerCpu] = await m.stop();
      const times = relay.acks.map((a) => a[1]).sort((a, b) => a - b);
      const per = 100_000 / (relay.acks.length - before);
      return { rowsPerSecond: DRAIN_ROWS / ((times[times.length - 1]! - times[0]!) / 1000), relay: relayCpu * per, backends: backendsCpu * per, broker: brokerCpu * per };
    }, { clientId, ...options });
  } finally {
    await drop();
  }
}

function line(f: Figures): string {
  const latency = f.p50 === undefined ? '' : `; commit → ack p50 ${fmt(f.p50, 1)} / p99 ${fmt(f.p99!, 1)} ms`;
  return `${fmt(f.rowsPerSecond)} rows/s; CPU-s per 100k rows: relay ${fmt(f.relay, 2)} + backends ${fmt(f.backends, 2)} + broker ${fmt(f.broker, 2)} = ${fmt(f.relay + f.backends + f.broker, 2)}${latency}`;
}

async function rounds(name: string, n: number, run: (options: Record<string, unknown>) => Promise<Figures>): Promise<string[]> {
  const results = new Map<string, Figures[]>(ARMS.map(([label]) => [label, []]));
  for (let round = 0; round < n; round++) {
    for (const [label, options] of round % 2 ? [...ARMS].reverse() : ARMS) {
      const f = await run(options);
      results.get(label)!.push(f);
      log(`${name}, round ${round + 1}, ${label}: ${line(f)}`);
    }
  }
  // Every arm ran every round, or the medians compare different things.
  for (const [label, figures] of results) if (figures.length !== n) throw new Error(`${name}: ${label} ran ${figures.length} of ${n} rounds`);
  return [...results].map(([label, figures]) => `${name}, median of ${n}, ${label}: ${line(medianOf(figures))}`);
}

function roundsArg(flag: string, fallback: number): number {
  const i = process.argv.indexOf(flag);
  const n = i < 0 ? fallback : Number(process.argv[i + 1]);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${flag} takes a positive integer`);
  return n;
}

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
try {
  const steadyRounds = roundsArg('--steady-rounds', 4);
  const drainRounds = roundsArg('--drain-rounds', 3);
  log('steady: a first round to warm the broker, not counted');
  await steady(pool, {});
  const out = [...(await rounds('steady 1,000 rows/s', steadyRounds, (o) => steady(pool, o))), ...(await rounds(`drain ${fmt(DRAIN_ROWS)} rows`, drainRounds, (o) => drain(pool, o)))];
  process.stdout.write(`${out.join('\n')}\n`);
} finally {
  await pool.end();
}
