/**
 * What the retention section watches while an arm runs: the outbox's size (table, indexes
 * and TOAST, summed over its partitions: pg_partition_tree), its dead tuples
 * (pg_stat_user_tables.n_dead_tup, summed the same way), the autovacuum runs on its tables
 * (autovacuum_count), its rows not yet sent, sampled every `everyMs`.
 */
import type pg from 'pg';
import { readFileSync } from 'node:fs';
import { TICKS_PER_SECOND, cpuTicks } from './procCpu.js';
import { sleep } from './util.js';

export interface Sample {
  /** Seconds since the load began. */
  t: number;
  bytes: number;
  deadTuples: number;
  /** Rows not yet sent; NaN when not counted (sampleOnce's countPending). */
  pending: number;
  /**
   * Autovacuum runs on the outbox's tables since the arm began: each table's
   * autovacuum_count, the largest seen, summed over every table seen (a dropped
   * partition's runs stay counted).
   */
  autovacuums: number;
}

/**
 * The outbox and its partitions: pg_partition_tree lists a partitioned table's tree, and
 * nothing for a plain table, so the table itself is added.
 */
const tree = (s: string): string => `(SELECT relid FROM pg_partition_tree('"${s}".outbox'::regclass) UNION SELECT '"${s}".outbox'::regclass)`;

/**
 * One sample; `vacuums` (table → its largest autovacuum_count yet) is updated.
 * `countPending: false` leaves `pending` NaN: the count walks the unsent-row index from
 * its lowest id, and under a held horizon every entry the hold keeps (at 560-590 s of a
 * 600 s hold at 2,000 rows/s: 115,318 buffer hits and 73,270 reads per sample,
 * bench/committed/held-horizon-leases-2026-12-05), a load on the disk beside the relay
 * that the held-horizon section, which does not use the count, must not add.
 */
export async function sampleOnce(pool: pg.Pool, schema: string, t: number, vacuums: Map<number, number>, options: { countPending?: boolean } = {}): Promise<Sample> {
  const pendingSql = options.countPending === false ? 'NULL::bigint' : `(SELECT count(*) FROM "${schema}".outbox WHERE sent_at IS NULL)`;
  const { rows } = await pool.query<{ bytes: string; dead: string; pending: string | null; vacuums: Record<string, number> | null }>(
    `SELECT (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM ${tree(schema)} AS t) AS bytes,
            (SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relid IN ${tree(schema)}) AS dead,
            (SELECT json_object_agg(relid::int8, autovacuum_count) FROM pg_stat_user_tables WHERE relid IN ${tree(schema)}) AS vacuums,
            ${pendingSql} AS pending`,
  );
  const r = rows[0]!;
  for (const [relid, n] of Object.entries(r.vacuums ?? {})) vacuums.set(Number(relid), Math.max(vacuums.get(Number(relid)) ?? 0, Number(n)));
  const autovacuums = [...vacuums.values()].reduce((a, b) => a + b, 0);
  return { t, bytes: Number(r.bytes), deadTuples: Number(r.dead), pending: r.pending === null ? NaN : Number(r.pending), autovacuums };
}

/** Samples every `everyMs` until stop(), which resolves with them all (one last sample included). */
export function startSampler(pool: pg.Pool, schema: string, everyMs: number, t0: number): { stop(): Promise<Sample[]> } {
  const samples: Sample[] = [];
  const vacuums = new Map<number, number>();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      samples.push(await sampleOnce(pool, schema, (Date.now() - t0) / 1000, vacuums));
      // Pacing of the sampling, not a wait for a condition.
      await sleep(everyMs);
    }
  })();
  loop.catch(() => undefined); // its error surfaces in stop()
  return {
    stop: async () => {
      stopped = true;
      await loop;
      samples.push(await sampleOnce(pool, schema, (Date.now() - t0) / 1000, vacuums));
      return samples;
    },
  };
}

/**
 * CPU of the cluster's autovacuum workers sampled from /proc every 50 ms: the postmaster's
 * children whose process title says `autovacuum worker`. A worker loses its CPU between its
 * last sample and its exit, and a worker that lives less than 50 ms may not be seen at all:
 * a lower bound. The retention section measures autovacuum exactly instead
 * (bench/postmasterCpu.ts); this is kept for test/postmasterCpu.integration.test.ts, which
 * shows the difference.
 */
export class AutovacuumMeter {
  private readonly first = new Map<number, number>();
  private readonly last = new Map<number, number>();
  private readonly isWorker = new Map<number, boolean>();
  private timer: NodeJS.Timeout | undefined;
  private started = false;

  constructor(private readonly postmasterPid: number) {}

  private workers(): number[] {
    let children: number[];
    try {
      children = readFileSync(`/proc/${this.postmasterPid}/task/${this.postmasterPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      return [];
    }
    return children.filter((pid) => {
      let known = this.isWorker.get(pid);
      if (known === undefined) {
        try {
          known = readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('autovacuum worker');
        } catch {
          known = false;
        }
        this.isWorker.set(pid, known);
      }
      return known;
    });
  }

  private sample(): void {
    for (const pid of this.workers()) {
      const t = cpuTicks(pid);
      if (t === undefined) continue;
      // A worker born after start() counts from its birth: its whole life is in the window.
      if (!this.first.has(pid)) this.first.set(pid, this.started ? 0 : t);
      this.last.set(pid, t);
    }
  }

  start(): void {
    this.sample();
    for (const [pid, t] of this.last) this.first.set(pid, t);
    this.started = true;
    this.timer = setInterval(() => this.sample(), 50);
  }

  /** CPU-seconds since start(). */
  stop(): number {
    clearInterval(this.timer);
    this.sample();
    let ticks = 0;
    for (const [pid, t0] of this.first) ticks += (this.last.get(pid) ?? t0) - t0;
    return ticks / TICKS_PER_SECOND;
  }
}

/** The postmaster's pid: the parent of one of our backends. */
export async function postmasterPid(pool: pg.Pool | pg.ClientBase): Promise<number> {
  const pid = (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** The largest sample's bytes within [from, to) seconds. */
export function peakBytes(samples: Sample[], from: number, to: number): number {
  return samples.filter((s) => s.t >= from && s.t < to).reduce((m, s) => Math.max(m, s.bytes), 0);
}

/**
 * How much the table grew in the second half of the load: the peak size in its last
 * quarter over the peak in its second quarter (after the first quarter's warm-up, in
 * which every arm grows to its working size). 1.0 is flat.
 */
export function growth(samples: Sample[], seconds: number): number {
  return peakBytes(samples, 0.75 * seconds, seconds + 1) / peakBytes(samples, 0.25 * seconds, 0.5 * seconds);
}

/** The sample closest to each of the given fractions of the load window. */
export function atFractions(samples: Sample[], seconds: number, fractions: number[]): Sample[] {
  return fractions.map((f) => samples.reduce((best, s) => (Math.abs(s.t - f * seconds) < Math.abs(best.t - f * seconds) ? s : best), samples[0]!));
}
