/**
 * One arm of the retention section (bench/sections/retention.ts): a fresh outbox in a
 * schema of its own on the section's Postgres cluster, pgbench writers at a fixed offered
 * rate for a fixed time, a relay process (or none, for the baseline), the arm's periodic
 * maintenance on a connection of its own (cleanup, or partition maintenance), and what the
 * arm costs and leaves behind: size and dead tuples over time (bench/retentionSampler.ts),
 * CPU of the relay process and, exactly, of the cluster's processes by kind (the relay's
 * backends, the maintenance connection, autovacuum workers: bench/postmasterCpu.ts),
 * commit → Kafka ack of probe rows, and the writers' throughput and latency.
 *
 * Every connection of the window stays open through it (the writers' until the load
 * ends), so that the only children of the postmaster that come and go unseen are
 * autovacuum workers: the section's pool keeps its idle connections and the cluster
 * runs no parallel query; the window starts once pgbench's clients are connected (its
 * first, short connection gone).
 */
import pg from 'pg';
import { migrate } from '../src/commands/migrate.js';
import { startChild, type Child } from './children.js';
import { KEYS, PARTITIONS, PAYLOAD, createTopic } from './common.js';
import { pgbench, tps } from './pgbench.js';
import { startProbes } from './probeRows.js';
import { CpuMeter } from './procCpu.js';
import { PostmasterCpuMeter, type PostmasterCpu } from './postmasterCpu.js';
import { postmasterPid, startSampler, type Sample } from './retentionSampler.js';
import { fmt, log, percentiles, sleep, until, type Percentiles } from './util.js';

/** What an arm does besides the writers. */
export interface ArmSpec {
  key: string;
  label: string;
  /** Relay options (clientId aside); no relay when undefined (the baseline). */
  relayOptions?: Record<string, unknown>;
  /** Run on the fresh, empty outbox before anything starts. */
  setup?(o: { databaseUrl: string; schema: string }): Promise<void>;
  /** Run every `maintainEveryMs` during the load and the drain-out, on its own connection. */
  maintain?(o: { client: pg.Client; schema: string }): Promise<void>;
}

export interface Load {
  /** Rows/s offered: pgbench transactions/s × rowsPerTransaction. */
  rate: number;
  rowsPerTransaction: number;
  seconds: number;
  sampleEveryMs: number;
  maintainEveryMs: number;
  /** Probe rows (for commit → ack) inserted every this many ms. */
  probeEveryMs: number;
}

export interface ArmResult {
  key: string;
  label: string;
  /** Rows the writers committed (pgbench), and all rows in the arm (with probes and the warm-up row). */
  writerRows: number;
  rowsInserted: number;
  /** Distinct rows Kafka acknowledged (relay arms). */
  rowsAcked: number;
  /** Rows no longer in the table at the end (deleted, or in dropped partitions). */
  rowsRemoved: number;
  writersTps: number;
  writersRowsPerSecond: number;
  writersLatencyMs: number;
  /** Acknowledged rows/s over the load window; seconds after it until the last row was acknowledged. */
  relayRowsPerSecond: number;
  drainOutSeconds: number;
  ack: Percentiles;
  probes: number;
  samples: Sample[];
  maintenanceRuns: number;
  /**
   * CPU-seconds over the load and the drain-out: the relay process (/proc of its pid), and
   * from the postmaster meter its backends, the maintenance connection's, the autovacuum
   * workers (those identified, and the children too short-lived to be: born and reaped
   * between two polls, `unseen`, or seen only untitled, `untitled`).
   */
  cpu: { relayProcess: number; relayBackends: number; maintenance: number; autovacuum: number };
  /** The postmaster meter's whole result (every kind, exits per kind). */
  postgres: PostmasterCpu;
  /** Autovacuum runs on the outbox's tables (pg_stat_user_tables.autovacuum_count), and n_dead_tup at the end of the window. */
  autovacuums: number;
  deadTuplesAtEnd: number;
  /** Seconds from the start of the load to the end of the CPU window. */
  windowSeconds: number;
}

const pgbenchCount = (out: string): number => {
  const m = /number of transactions actually processed: (\d+)/.exec(out);
  if (!m) throw new Error(`pgbench output not understood:\n${out}`);
  return Number(m[1]);
};

const pgbenchLatency = (out: string): number => Number(/latency average = ([\d.]+) ms/.exec(out)?.[1] ?? NaN);

/** A loop calling `step` every `everyMs` until stopped, one call at a time. */
function periodically(step: () => Promise<void>, everyMs: number): { runs(): number; stop(): Promise<void> } {
  let stopped = false;
  let runs = 0;
  const loop = (async () => {
    while (!stopped) {
      const started = Date.now();
      await step();
      runs++;
      // Pacing: the maintenance schedule, not a wait for a condition.
      await sleep(Math.max(0, everyMs - (Date.now() - started)));
    }
  })();
  loop.catch(() => undefined); // its error surfaces in stop()
  return { runs: () => runs, stop: async () => ((stopped = true), await loop) };
}

export async function runArm(pool: pg.Pool, databaseUrl: string, spec: ArmSpec, load: Load, index: number): Promise<ArmResult> {
  const schema = `bench_retention_${spec.key}_${Date.now().toString(36)}`;
  const clientId = `bench-retention-${index}`;
  const section = `12. retention, ${spec.label}`;
  await migrate({ databaseUrl, schema });
  const maintenance = new pg.Client({ connectionString: databaseUrl, application_name: 'bench-retention-maintenance' });
  let relay: Child | undefined;
  let relayProcessCpu: CpuMeter | undefined;
  let postgresCpu: PostmasterCpuMeter | undefined;
  let naming: { stop(): Promise<void> } | undefined;
  try {
    const topic = await createTopic(PARTITIONS);
    await spec.setup?.({ databaseUrl, schema });
    await maintenance.connect();
    const maintenancePid = (await maintenance.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    if (spec.relayOptions) {
      relay = startChild('relay', { BENCH_SCHEMA: schema, DATABASE_URL: databaseUrl, BENCH_RELAY_OPTIONS: JSON.stringify({ clientId, ...spec.relayOptions }) });
      await relay.ready;
      await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
      const r = relay;
      await until(`${section}: the warm-up row through`, () => r.acks.length > 0, 60_000, 10);
    }
    const r = relay;
    postgresCpu = new PostmasterCpuMeter(await postmasterPid(pool));
    const meter = postgresCpu;
    meter.name(maintenancePid, 'maintenance');
    // Backends by application_name, named to the meter before they exit (all live long).
    const nameBackends = async (): Promise<number> => {
      const { rows } = await pool.query<{ pid: number; name: string }>(`SELECT pid, application_name AS name FROM pg_stat_activity WHERE backend_type = 'client backend'`);
      for (const b of rows) meter.name(b.pid, b.name === 'pgbench' ? 'pgbench' : b.name.startsWith(`${clientId}:`) || b.name === clientId ? 'relay' : b.name === 'bench-retention-maintenance' ? 'maintenance' : 'bench');
      return rows.filter((b) => b.name === 'pgbench').length;
    };
    log(`${section}: ${fmt(load.rate)} rows/s offered for ${load.seconds} s`);
    const k = load.rowsPerTransaction;
    const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) SELECT '${topic}', 'key-' || ((:k + g) % ${KEYS}), '${PAYLOAD}', clock_timestamp() FROM generate_series(1, ${k}) AS g;\n`;
    const writers = pgbench(script, ['-c', '4', '-j', '2', '-R', String(load.rate / k), '-T', String(load.seconds)], databaseUrl);
    let writersDone = false;
    writers.then(
      () => (writersDone = true),
      () => (writersDone = true),
    );
    // The window opens once the four clients are connected: pgbench's first connection
    // (its checks) is gone by then, and the clients stay until the load ends.
    await until(`${section}: pgbench's clients connected`, async () => writersDone || (await nameBackends()) >= 4, 30_000, 5);
    relayProcessCpu = new CpuMeter(() => (r?.process.pid ? [r.process.pid] : []));
    const t0 = Date.now();
    await relayProcessCpu.start();
    meter.start();
    let naming_ = true;
    const namer = (async () => {
      while (naming_) {
        await nameBackends();
        await sleep(250); // pacing of the naming: a backend lives far longer
      }
    })();
    namer.catch(() => undefined); // its error surfaces in stop()
    naming = { stop: async () => ((naming_ = false), await namer) };
    const sampler = startSampler(pool, schema, load.sampleEveryMs, t0);
    const maintain = spec.maintain;
    const loop = maintain ? periodically(() => maintain({ client: maintenance, schema }), load.maintainEveryMs) : undefined;
    // Probe rows for commit → ack: the writers' own rows are deleted or dropped before they could be read back.
    const prober = startProbes(pool, schema, topic, load.probeEveryMs);
    const probes = prober.committed;
    const out = await writers;
    const loadEnd = Date.now();
    await prober.stop();
    const transactions = pgbenchCount(out);
    const writerRows = transactions * k;
    const rowsInserted = writerRows + probes.size + (relay ? 1 : 0);
    let rowsAcked = 0;
    let ackedInLoad = 0;
    let lastAck = loadEnd;
    if (relay) {
      const rl = relay;
      const distinct = (): number => new Set(rl.acks.map((a) => a[0])).size;
      await until(`${section}: every row acknowledged`, () => distinct() >= rowsInserted, 300_000, 200);
      rowsAcked = distinct();
      const firstAck = new Map<number, number>();
      for (const [id, t] of rl.acks) if (!firstAck.has(id)) firstAck.set(id, t);
      for (const t of firstAck.values()) {
        if (t >= t0 && t <= loadEnd) ackedInLoad++;
        lastAck = Math.max(lastAck, t);
      }
    }
    await nameBackends();
    await naming.stop();
    naming = undefined;
    const relayProcess = await relayProcessCpu.stop();
    relayProcessCpu = undefined;
    const postgres = meter.stop();
    postgresCpu = undefined;
    const windowSeconds = (Date.now() - t0) / 1000;
    await loop?.stop();
    const samples = await sampler.stop();
    const left = Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outbox`)).rows[0]!.n);
    const latencies: number[] = [];
    if (relay) {
      const firstAck = new Map<number, number>();
      for (const [id, t] of relay.acks) if (!firstAck.has(id)) firstAck.set(id, t);
      for (const [id, t] of probes) {
        const a = firstAck.get(id);
        if (a !== undefined) latencies.push(Math.max(0, a - t));
      }
      latencies.sort((a, b) => a - b);
    }
    return {
      key: spec.key,
      label: spec.label,
      writerRows,
      rowsInserted,
      rowsAcked,
      rowsRemoved: rowsInserted - left,
      writersTps: tps(out),
      writersRowsPerSecond: tps(out) * k,
      writersLatencyMs: pgbenchLatency(out),
      relayRowsPerSecond: relay ? ackedInLoad / load.seconds : NaN,
      drainOutSeconds: relay ? Math.max(0, lastAck - loadEnd) / 1000 : NaN,
      ack: percentiles(latencies),
      probes: probes.size,
      samples,
      maintenanceRuns: loop?.runs() ?? 0,
      cpu: {
        relayProcess,
        relayBackends: postgres.seconds.relay ?? 0,
        maintenance: postgres.seconds.maintenance ?? 0,
        // Children too short-lived to be identified are autovacuum workers here: every other child of the window lives long (the header).
        autovacuum: (postgres.seconds.autovacuum ?? 0) + (postgres.seconds.unseen ?? 0) + (postgres.seconds.untitled ?? 0),
      },
      postgres,
      autovacuums: samples.at(-1)!.autovacuums,
      deadTuplesAtEnd: samples.at(-1)!.deadTuples,
      windowSeconds,
    };
  } finally {
    await naming?.stop().catch(() => undefined);
    await relayProcessCpu?.stop().catch(() => undefined);
    postgresCpu?.stop();
    await relay?.stop();
    await maintenance.end().catch(() => undefined);
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  }
}
