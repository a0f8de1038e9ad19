/**
 * One arm of the held-horizon section (bench/sections/heldHorizon.ts): one system (the
 * relay in a mode, or the plain SKIP LOCKED queue of bench/plainQueue.ts) on a fresh table
 * in a schema of its own, under pgbench writers at a steady offered rate for the whole
 * arm, through a timeline of phases: clean, then for each hold (bench/horizonHolds.ts) the
 * hold itself and a window after its release.
 *
 * Per phase: rows inserted (the table's sequence at the phase's edges) and acknowledged by
 * Kafka in it (their first acknowledgement inside it), commit → ack of probe rows inserted
 * in it, CPU-seconds of the system's Postgres backends (by application_name) and of its
 * process (/proc; the relay runs with its metrics' sampler, as `outbox-relay run` does by
 * default), dead tuples and table size (bench/retentionSampler.ts), partition
 * headroom, warnings the relay logged. After a release: how long until the last probe row
 * committed during the hold was acknowledged (the backlog the hold left, gone).
 *
 * The phases follow a wall-clock schedule: the waits below are the schedule's pacing, not
 * waits for a condition.
 */
import pg from 'pg';
import { migrate } from '../src/commands/migrate.js';
import { partitionHeadroomSql } from '../src/relay/partitions.js';
import { outboxLastIdSql } from '../src/shared/outboxSequence.js';
import type { ArmFacts } from './armFacts.js';
import { startChild, type Child } from './children.js';
import { KEYS, PARTITIONS, PAYLOAD, createTopic } from './common.js';
import { startHold, type Hold, type HoldKind } from './horizonHolds.js';
import { pgbench } from './pgbench.js';
import { plainQueueTableSql } from './plainQueue.js';
import { startProbes } from './probeRows.js';
import { CpuMeter, backendPids } from './procCpu.js';
import { sampleOnce, type Sample } from './retentionSampler.js';
import { log, percentiles, sleep, until, type Percentiles } from './util.js';

export interface HeldSystem {
  key: 'mark' | 'delete' | 'partition' | 'queue';
  label: string;
  /** Relay options (clientId aside); the plain queue when undefined. */
  relayOptions?: Record<string, unknown>;
  /** Run on the fresh, migrated schema before anything starts (the queue makes its own table). */
  setup?(o: { databaseUrl: string; schema: string }): Promise<void>;
}

export interface HeldProfile {
  /** Rows/s offered (pgbench transactions/s × rowsPerTransaction). */
  rate: number;
  rowsPerTransaction: number;
  cleanSeconds: number;
  holdSeconds: number;
  /** Seconds of load after each release, before the next hold. */
  afterSeconds: number;
  holds: readonly HoldKind[];
  sampleEveryMs: number;
  probeEveryMs: number;
}

export interface Phase {
  /** `clean`, a hold's kind, or `after <kind>`. */
  name: string;
  seconds: number;
  inserted: number;
  acked: number;
  ack: Percentiles;
  probes: number;
  /** CPU-seconds per 100,000 rows inserted in the phase: the system's Postgres backends, its process. */
  backendsPer100k: number;
  processPer100k: number;
  deadTuplesPeak: number;
  bytesAtStart: number;
  bytesAtEnd: number;
  /** Partitioned outbox: the fewest ids left before the last partition was full, over the phase's samples. */
  headroomMin?: number;
  warnings: Array<{ message: string; blockerPid?: number }>;
  /** A hold's phase: who held, as pg_stat_activity showed it at the start and still at the end. */
  holder?: Hold['holder'];
  /** An `after` phase: seconds from the release until the last probe row committed during the hold was acknowledged (NaN: not within the phase). */
  recoverySeconds?: number;
}

export interface HeldArmResult {
  key: HeldSystem['key'];
  label: string;
  ran: ArmFacts;
  phases: Phase[];
  samples: Array<Sample & { headroom?: number }>;
  rowsInserted: number;
  rowsAcked: number;
}

const per100k = (cpu: number, rows: number): number => (rows > 0 ? (cpu * 100_000) / rows : NaN);

/** Waits until `at` (ms since epoch): the schedule's pacing. */
const sleepUntil = async (at: number): Promise<void> => sleep(Math.max(0, at - Date.now()));

export async function runHeldArm(pool: pg.Pool, databaseUrl: string, system: HeldSystem, profile: HeldProfile, index: number): Promise<HeldArmResult> {
  const schema = `bench_held_${system.key}_${Date.now().toString(36)}`;
  const clientId = `bench-held-${index}`;
  const section = `18. held horizon, ${system.label}`;
  if (system.relayOptions) {
    await migrate({ databaseUrl, schema });
    await system.setup?.({ databaseUrl, schema });
  } else {
    await pool.query(plainQueueTableSql(schema));
  }
  const lastId = async (): Promise<number> => Number((await pool.query<{ v: string }>(`SELECT ${outboxLastIdSql(`"${schema}"`)}::text AS v`)).rows[0]!.v);
  const child: Child = system.relayOptions
    ? startChild('relay', { BENCH_SCHEMA: schema, DATABASE_URL: databaseUrl, BENCH_RELAY_METRICS: '1', BENCH_RELAY_OPTIONS: JSON.stringify({ clientId, ...system.relayOptions }) })
    : startChild('queue', { BENCH_SCHEMA: schema, DATABASE_URL: databaseUrl, BENCH_CLIENT_ID: clientId });
  let holdNow: Hold | undefined;
  try {
    await child.ready;
    const topic = await createTopic(PARTITIONS);
    await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
    await until(`${section}: the warm-up row through`, () => child.acks.length > 0, 60_000, 10);
    const idBefore = await lastId();
    const total = profile.cleanSeconds + profile.holds.length * (profile.holdSeconds + profile.afterSeconds);
    const k = profile.rowsPerTransaction;
    const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) SELECT '${topic}', 'key-' || ((:k + g) % ${KEYS}), '${PAYLOAD}', clock_timestamp() FROM generate_series(1, ${k}) AS g;\n`;
    log(`${section}: ${profile.rate} rows/s offered for ${total} s: clean ${profile.cleanSeconds} s, then ${profile.holds.join(', ')} held ${profile.holdSeconds} s each, ${profile.afterSeconds} s after each`);
    const writers = pgbench(script, ['-c', '4', '-j', '2', '-R', String(profile.rate / k), '-T', String(total)], databaseUrl);
    writers.catch(() => undefined); // awaited below
    const t0 = Date.now();
    const partitioned = system.key === 'partition';
    const samples: HeldArmResult['samples'] = [];
    const vacuums = new Map<number, number>();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const s: Sample & { headroom?: number } = await sampleOnce(pool, schema, (Date.now() - t0) / 1000, vacuums, { countPending: false });
        if (partitioned) s.headroom = Number((await pool.query<{ headroom: string }>(partitionHeadroomSql(`"${schema}"`))).rows[0]?.headroom ?? NaN);
        samples.push(s);
        await sleep(profile.sampleEveryMs); // pacing of the sampling
      }
    })();
    sampler.catch(() => undefined); // surfaces when awaited
    const prober = startProbes(pool, schema, topic, profile.probeEveryMs);
    const probes = prober.committed;
    const windows: Array<{ name: string; start: number; end: number; inserted: number; backends: number; process: number; holder?: Hold['holder']; releasedAt?: number; heldFrom?: number }> = [];
    /** Runs one phase until `end`, metering it; `during` starts and ends whatever the phase holds. */
    const phase = async (name: string, seconds: number, during?: { begin(): Promise<Hold['holder']>; end(): Promise<void> }): Promise<(typeof windows)[number]> => {
      const backends = new CpuMeter(() => backendPids(pool, clientId));
      const proc = new CpuMeter(() => (child.process.pid ? [child.process.pid] : []));
      const idStart = await lastId();
      await Promise.all([backends.start(), proc.start()]);
      const start = Date.now();
      const holder = await during?.begin();
      await sleepUntil(start + seconds * 1000);
      await during?.end();
      const end = Date.now();
      const [b, p] = await Promise.all([backends.stop(), proc.stop()]);
      const w = { name, start, end, inserted: (await lastId()) - idStart, backends: b, process: p, ...(holder && { holder }) };
      windows.push(w);
      return w;
    };
    await phase('clean', profile.cleanSeconds);
    for (const kind of profile.holds) {
      log(`${section}: holding with ${kind} for ${profile.holdSeconds} s`);
      let heldAt: Hold['holder'] | undefined;
      await phase(kind, profile.holdSeconds, {
        begin: async () => {
          holdNow = await startHold(databaseUrl, kind, schema);
          heldAt = holdNow.holder;
          return holdNow.holder;
        },
        end: async () => {
          // Still in force at the end of the phase: the same transaction, still open.
          const { rows } = await pool.query<{ xmin: string | null; xid: string | null }>('SELECT backend_xmin::text AS xmin, backend_xid::text AS xid FROM pg_stat_activity WHERE pid = $1', [heldAt!.pid]);
          const still = rows[0] && (kind === 'xid' ? rows[0].xid === heldAt!.backendXid : rows[0].xmin === heldAt!.backendXmin);
          if (!still) throw new Error(`${section}: the ${kind} hold was no longer in force at its end (${JSON.stringify(rows[0] ?? 'gone')})`);
          await holdNow!.release();
          holdNow = undefined;
        },
      });
      await phase(`after ${kind}`, profile.afterSeconds);
    }
    await writers;
    await prober.stop();
    const idEnd = await lastId();
    const rowsInserted = idEnd - idBefore;
    const distinct = (): number => new Set(child.acks.map((a) => a[0]).filter((id) => id > idBefore)).size;
    await until(`${section}: every row acknowledged (${rowsInserted})`, () => distinct() >= rowsInserted, 300_000, 200);
    sampling = false;
    await sampler;
    const firstAck = new Map<number, number>();
    for (const [id, t] of child.acks) if (!firstAck.has(id)) firstAck.set(id, t);
    const phases = windows.map((w, i): Phase => {
      const inWindow = (t: number): boolean => t >= w.start && t < w.end;
      let acked = 0;
      for (const t of firstAck.values()) if (inWindow(t)) acked++;
      const latencies: number[] = [];
      for (const [id, t] of probes) if (inWindow(t)) latencies.push(Math.max(0, (firstAck.get(id) ?? Infinity) - t));
      latencies.sort((a, b) => a - b);
      const mine = samples.filter((s) => inWindow(t0 + s.t * 1000));
      const headrooms = mine.map((s) => s.headroom).filter((h): h is number => h !== undefined && Number.isFinite(h));
      const p: Phase = {
        name: w.name,
        seconds: (w.end - w.start) / 1000,
        inserted: w.inserted,
        acked,
        ack: percentiles(latencies),
        probes: latencies.length,
        backendsPer100k: per100k(w.backends, w.inserted),
        processPer100k: per100k(w.process, w.inserted),
        deadTuplesPeak: Math.max(0, ...mine.map((s) => s.deadTuples)),
        bytesAtStart: mine[0]?.bytes ?? NaN,
        bytesAtEnd: mine.at(-1)?.bytes ?? NaN,
        ...(headrooms.length > 0 && { headroomMin: Math.min(...headrooms) }),
        warnings: child.warnings.filter(([t]) => inWindow(t)).map(([, message, blockerPid]) => ({ message, ...(blockerPid !== undefined && { blockerPid }) })),
        ...(w.holder && { holder: w.holder }),
      };
      const held = windows[i - 1];
      if (w.name.startsWith('after ') && held) {
        let last = -Infinity;
        for (const [id, t] of probes) if (t >= held.start && t < held.end) last = Math.max(last, firstAck.get(id) ?? Infinity);
        const seconds = Math.max(0, last - held.end) / 1000;
        p.recoverySeconds = Number.isFinite(last) && last < w.end ? seconds : NaN;
      }
      return p;
    });
    return { key: system.key, label: system.label, ran: child.ran!, phases, samples, rowsInserted, rowsAcked: distinct() };
  } finally {
    await holdNow?.release().catch(() => undefined);
    await child.stop();
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  }
}

/** The phases an arm of `profile` runs, in order: what the section's self-check compares with. */
export function expectedPhases(profile: HeldProfile): string[] {
  return ['clean', ...profile.holds.flatMap((k) => [k, `after ${k}`])];
}
