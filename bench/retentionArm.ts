/**
 * One arm of the retention section (bench/sections/retention.ts): a fresh outbox in a
 * schema of its own on the section's Postgres cluster, pgbench writers at a fixed offered
 * rate for a fixed time, a relay process (or none, for the baseline), the arm's periodic
 * maintenance on a connection of its own (cleanup, or partition maintenance), and what the
 * arm costs and leaves behind: size and dead tuples over time (bench/retentionSampler.ts),
 * CPU of the relay, its backends, the maintenance connection and autovacuum (/proc), commit
 * → Kafka ack of probe rows, and the writers' throughput and latency.
 */
import pg from 'pg';
import { migrate } from '../src/commands/migrate.js';
import { startChild, type Child } from './children.js';
import { KEYS, PARTITIONS, PAYLOAD, createTopic } from './common.js';
import { pgbench, tps } from './pgbench.js';
import { CpuMeter, backendPids } from './procCpu.js';
import { AutovacuumMeter, postmasterPid, startSampler, type Sample } from './retentionSampler.js';
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
  /** CPU-seconds over the load and the drain-out. */
  cpu: { relayProcess: number; relayBackends: number; maintenance: number; autovacuum: number };
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
  const meters: CpuMeter[] = [];
  let autovacuum: AutovacuumMeter | undefined;
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
    const cpu = {
      relayProcess: new CpuMeter(() => (r?.process.pid ? [r.process.pid] : [])),
      relayBackends: new CpuMeter(() => (r ? backendPids(pool, clientId) : [])),
      maintenance: new CpuMeter(() => [maintenancePid]),
    };
    meters.push(...Object.values(cpu));
    autovacuum = new AutovacuumMeter(await postmasterPid(pool));
    const t0 = Date.now();
    await Promise.all(meters.map((m) => m.start()));
    autovacuum.start();
    const sampler = startSampler(pool, schema, load.sampleEveryMs, t0);
    const maintain = spec.maintain;
    const loop = maintain ? periodically(() => maintain({ client: maintenance, schema }), load.maintainEveryMs) : undefined;
    // Probe rows, one at a time, for commit → ack: the writers' own rows are deleted or
    // dropped before they could be read back.
    const probes = new Map<number, number>();
    let probing = true;
    const prober = (async () => {
      while (probing) {
        const { rows } = await pool.query<{ id: string; t: number }>(
          `INSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ($1, 'probe', $2, clock_timestamp()) RETURNING id, extract(epoch FROM created_at) * 1000 AS t`,
          [topic, PAYLOAD],
        );
        probes.set(Number(rows[0]!.id), Number(rows[0]!.t));
        await sleep(load.probeEveryMs); // pacing of the probes
      }
    })();
    prober.catch(() => undefined); // its error surfaces below, when awaited
    log(`${section}: ${fmt(load.rate)} rows/s offered for ${load.seconds} s`);
    const k = load.rowsPerTransaction;
    const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) SELECT '${topic}', 'key-' || ((:k + g) % ${KEYS}), '${PAYLOAD}', clock_timestamp() FROM generate_series(1, ${k}) AS g;\n`;
    const out = await pgbench(script, ['-c', '4', '-j', '2', '-R', String(load.rate / k), '-T', String(load.seconds)], databaseUrl);
    const loadEnd = Date.now();
    probing = false;
    await prober;
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
    const [relayProcess, relayBackends, maintenanceCpu] = await Promise.all([cpu.relayProcess.stop(), cpu.relayBackends.stop(), cpu.maintenance.stop()]);
    const autovacuumCpu = autovacuum.stop();
    meters.length = 0;
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
      cpu: { relayProcess, relayBackends, maintenance: maintenanceCpu, autovacuum: autovacuumCpu },
      windowSeconds,
    };
  } finally {
    autovacuum?.stop();
    await Promise.all(meters.map((m) => m.stop().catch(() => undefined)));
    await relay?.stop();
    await maintenance.end().catch(() => undefined);
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  }
}
