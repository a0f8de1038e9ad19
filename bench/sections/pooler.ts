/**
 * 13. What the relay's pooled mode costs (issue 20): the relay on a direct connection (its
 * defaults) against the relay through PgBouncer in transaction pooling (`pooler:
 * 'transaction'`: no named prepared statements, no session state), side by side on one
 * Postgres cluster of the section's own (scripts/localPostgres.ts) with a PgBouncer of its
 * own in front of it (scripts/pgbouncer.ts, Debian's package), so that every client backend
 * of the cluster but the bench's own connections serves the relay.
 *
 * - drain: a committed, vacuumed backlog drained by a relay process, the arms alternating
 *   (the first swapped every round): rows/s from the first Kafka acknowledgement to the
 *   last (as bench/relayDrain.ts), CPU-seconds per 100,000 rows of the Postgres backends
 *   serving the relay, of the relay process and of PgBouncer (/proc), over that window;
 * - pick-up: pgbench writers offering a low steady rate (Poisson arrivals, one autocommit
 *   insert each, created_at = clock_timestamp(), on a direct connection), commit → Kafka
 *   ack per row. There is no LISTEN in either arm: the relay polls (pollIntervalMs) and
 *   probes its horizon.
 *
 * The section checks itself: every arm drained every row of every round, the pick-up rows
 * were all acknowledged, and the pooled arm's transactions went through PgBouncer (its
 * SHOW STATS counts them).
 */
import pg from 'pg';
import { migrate } from '../../src/commands/migrate.js';
import { startLocalPostgres } from '../../scripts/localPostgres.js';
import { startPgBouncer, type PgBouncer } from '../../scripts/pgbouncer.js';
import { startChild } from '../children.js';
import { KEYS, PARTITIONS, PAYLOAD, createTopic, fillBacklog, name } from '../common.js';
import { CpuMeter } from '../procCpu.js';
import { pgbench } from '../pgbench.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log, percentiles, until, type Percentiles } from '../util.js';

const S = '13. pooled mode';
const ADMIN_APP = 'bench-pooler-admin';
/** Rows/s offered for pick-up latency: low, as section 9's pick-up. */
const LOW_RATE = 50;

type ArmKey = 'direct' | 'pooled';
const LABEL: Record<ArmKey, string> = { direct: 'direct connection (defaults)', pooled: "through PgBouncer, transaction pooling (pooler: 'transaction')" };

export interface PoolerOptions {
  rows: number;
  rounds: number;
  pickUpSeconds: number;
}

export interface DrainFigures {
  rowsPerSecond: number;
  /** CPU-seconds per 100,000 rows. */
  postgresCpu: number;
  relayCpu: number;
  pgbouncerCpu: number;
  /** Transactions PgBouncer counted during the drain (0 on the direct arm). */
  pgbouncerTransactions: number;
}

export interface PoolerData {
  rows: number;
  rounds: Array<Record<ArmKey, DrainFigures>>;
  medians: Record<ArmKey, DrainFigures>;
  pickUp: Record<ArmKey, { offered: number; rows: number; ack: Percentiles }>;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

class Bench {
  private armNo = 0;
  constructor(
    readonly pool: pg.Pool,
    readonly directUrl: string,
    readonly bouncer: PgBouncer,
  ) {}

  /** The cluster's client backends but the bench's own: the ones serving the relay. */
  async relayBackends(): Promise<number[]> {
    const { rows } = await this.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND application_name NOT IN ($1, 'pgbench')`, [ADMIN_APP]);
    return rows.map((r) => r.pid);
  }

  async bouncerTransactions(): Promise<number> {
    const stats = await this.bouncer.admin('SHOW STATS');
    return stats.filter((r) => r.database === 'postgres').reduce((n, r) => n + Number(r.total_xact_count ?? 0), 0);
  }

  /** A relay process on a fresh schema: through PgBouncer with pooler 'transaction', or direct at its defaults. */
  async relay<T>(arm: ArmKey, schema: string, body: (r: ReturnType<typeof startChild>) => Promise<T>): Promise<T> {
    const options = { clientId: `bench-pooler-${++this.armNo}`, ...(arm === 'pooled' && { pooler: 'transaction' }) };
    const url = arm === 'pooled' ? this.bouncer.url('postgres') : this.directUrl;
    const relay = startChild('relay', { BENCH_SCHEMA: schema, DATABASE_URL: url, BENCH_RELAY_OPTIONS: JSON.stringify(options) });
    try {
      await relay.ready;
      return await body(relay);
    } finally {
      await relay.stop();
    }
  }

  async drain(arm: ArmKey, rows: number): Promise<DrainFigures> {
    const schema = name('bench_pooler');
    await migrate({ databaseUrl: this.directUrl, schema });
    try {
      const topic = await createTopic(PARTITIONS);
      log(`${S}, drain, ${arm}: filling a ${fmt(rows)}-row backlog`);
      await fillBacklog(this.pool, schema, topic, rows, KEYS);
      const xactsBefore = await this.bouncerTransactions();
      return await this.relay(arm, schema, async (relay) => {
        const postgres = new CpuMeter(() => this.relayBackends());
        const process = new CpuMeter(() => (relay.process.pid ? [relay.process.pid] : []));
        const bouncerPid = this.bouncer.pid();
        const bouncer = new CpuMeter(() => (bouncerPid ? [bouncerPid] : []));
        // From the first acknowledged batch on, as the drain and cost sections: start-up is not per row.
        await until(`${S}, drain, ${arm}: first batch`, () => relay.acks.length > 0, 600_000, 10);
        const ackedBefore = relay.acks.length;
        await Promise.all([postgres.start(), process.start(), bouncer.start()]);
        await until(`${S}, drain, ${arm}: drained`, () => relay.acks.length >= rows, 1_800_000, 100);
        const [pgCpu, relayCpu, bouncerCpu] = await Promise.all([postgres.stop(), process.stop(), bouncer.stop()]);
        const distinct = new Set(relay.acks.map((a) => a[0])).size;
        if (distinct < rows) throw new Error(`${S}, drain, ${arm}: ${distinct} distinct rows of ${rows} acknowledged`);
        const times = relay.acks.map((a) => a[1]).sort((a, b) => a - b);
        const first = times[0]!;
        const per = 100_000 / (relay.acks.length - ackedBefore);
        return {
          rowsPerSecond: times.filter((t) => t > first).length / ((times[times.length - 1]! - first) / 1000),
          postgresCpu: pgCpu * per,
          relayCpu: relayCpu * per,
          pgbouncerCpu: bouncerCpu * per,
          pgbouncerTransactions: (await this.bouncerTransactions()) - xactsBefore,
        };
      });
    } finally {
      await this.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  }

  async pickUp(arm: ArmKey, seconds: number): Promise<{ offered: number; rows: number; ack: Percentiles }> {
    const schema = name('bench_pooler_pickup');
    await migrate({ databaseUrl: this.directUrl, schema });
    try {
      const topic = await createTopic(PARTITIONS);
      return await this.relay(arm, schema, async (relay) => {
        await this.pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
        await until(`${S}, pick-up, ${arm}: the warm-up row through`, () => relay.acks.length > 0, 60_000, 10);
        const before = Number((await this.pool.query<{ m: string }>(`SELECT max(id) AS m FROM "${schema}".outbox`)).rows[0]!.m);
        log(`${S}, pick-up, ${arm}: ${LOW_RATE} rows/s offered for ${seconds} s`);
        const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`;
        await pgbench(script, ['-c', '2', '-j', '1', '-R', String(LOW_RATE), '-T', String(seconds)], this.directUrl);
        const { rows } = await this.pool.query<{ id: string; t: number }>(`SELECT id, extract(epoch FROM created_at) * 1000 AS t FROM "${schema}".outbox WHERE id > $1`, [before]);
        const committed = new Map(rows.map((r) => [Number(r.id), Number(r.t)]));
        const firstAck = (): Map<number, number> => {
          const m = new Map<number, number>();
          for (const [id, t] of relay.acks) if (!m.has(id)) m.set(id, t);
          return m;
        };
        await until(`${S}, pick-up, ${arm}: every row acknowledged`, () => [...committed.keys()].every((id) => firstAck().has(id)), 60_000, 50);
        const acks = firstAck();
        const latencies = [...committed].map(([id, t]) => Math.max(0, acks.get(id)! - t)).sort((a, b) => a - b);
        return { offered: LOW_RATE, rows: committed.size, ack: percentiles(latencies) };
      });
    } finally {
      await this.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  }
}

export async function pooler(_pool: pg.Pool, o: PoolerOptions): Promise<SectionResult<PoolerData>> {
  const db = await startLocalPostgres();
  let bouncer: PgBouncer | undefined;
  const pool = new pg.Pool({ connectionString: db.url, max: 4, application_name: ADMIN_APP });
  const rounds: PoolerData['rounds'] = [];
  const pickUp: Partial<PoolerData['pickUp']> = {};
  try {
    bouncer = await startPgBouncer({ mode: 'transaction', pgPort: db.port, database: 'postgres' });
    const bench = new Bench(pool, db.url, bouncer);
    for (let i = 0; i < o.rounds; i++) {
      log(`${S}: drain round ${i + 1} of ${o.rounds}`);
      const order: ArmKey[] = i % 2 === 0 ? ['direct', 'pooled'] : ['pooled', 'direct'];
      const round: Partial<Record<ArmKey, DrainFigures>> = {};
      for (const arm of order) round[arm] = await bench.drain(arm, o.rows);
      rounds.push(round as Record<ArmKey, DrainFigures>);
    }
    for (const arm of ['direct', 'pooled'] as const) pickUp[arm] = await bench.pickUp(arm, o.pickUpSeconds);
  } finally {
    await pool.end();
    await bouncer?.stop();
    await db.destroy();
  }
  // The self-check: every round of both arms, the pooled one through PgBouncer, the direct one not.
  const problems: string[] = [];
  if (rounds.length !== o.rounds) problems.push(`${rounds.length} of ${o.rounds} drain rounds`);
  for (const [i, r] of rounds.entries()) {
    const batches = o.rows / 1_000; // fewer transactions than this would mean the relay did not go through it
    if (!(r.pooled.pgbouncerTransactions >= batches)) problems.push(`round ${i + 1}: only ${r.pooled.pgbouncerTransactions} transactions through PgBouncer in the pooled drain`);
    if (r.direct.pgbouncerTransactions !== 0) problems.push(`round ${i + 1}: ${r.direct.pgbouncerTransactions} transactions through PgBouncer in the direct drain`);
  }
  for (const arm of ['direct', 'pooled'] as const) if (!(pickUp[arm] && pickUp[arm]!.rows >= LOW_RATE * o.pickUpSeconds * 0.5)) problems.push(`pick-up ${arm}: ${pickUp[arm]?.rows ?? 0} rows`);
  if (problems.length > 0) throw new Error(`${S}: the section did not run as its profile says: ${problems.join('; ')}`);

  const medians = Object.fromEntries(
    (['direct', 'pooled'] as const).map((arm) => {
      const f = (k: keyof DrainFigures): number => median(rounds.map((r) => r[arm][k]));
      return [arm, { rowsPerSecond: f('rowsPerSecond'), postgresCpu: f('postgresCpu'), relayCpu: f('relayCpu'), pgbouncerCpu: f('pgbouncerCpu'), pgbouncerTransactions: f('pgbouncerTransactions') }];
    }),
  ) as Record<ArmKey, DrainFigures>;
  const d = medians.direct;
  const p = medians.pooled;
  const of = `median of ${o.rounds}`;
  const rows: Row[] = [];
  for (const arm of ['direct', 'pooled'] as const) {
    const m = medians[arm];
    rows.push(
      row(
        S,
        `drain ${fmt(o.rows)} rows, ${LABEL[arm]}, ${of}`,
        `${fmt(m.rowsPerSecond)} rows/s; CPU-s per 100k rows: Postgres backends ${fmt(m.postgresCpu, 2)}, relay process ${fmt(m.relayCpu, 2)}${arm === 'pooled' ? `, PgBouncer ${fmt(m.pgbouncerCpu, 2)}` : ''}`,
      ),
    );
  }
  rows.push(row(S, `drain, pooled / direct: rows/s; Postgres CPU-s per row; relay process CPU-s per row`, `${fmt(p.rowsPerSecond / d.rowsPerSecond, 2)}; ${fmt(p.postgresCpu / d.postgresCpu, 2)}; ${fmt(p.relayCpu / d.relayCpu, 2)}`));
  for (const arm of ['direct', 'pooled'] as const) {
    const u = pickUp[arm]!;
    rows.push(row(S, `pick-up at ${u.offered} rows/s offered (${fmt(u.rows)} rows), ${LABEL[arm]}: commit → ack`, `p50 ${fmt(u.ack.p50, 1)} / p95 ${fmt(u.ack.p95, 1)} / p99 ${fmt(u.ack.p99, 1)} ms`));
  }
  return { data: { rows: o.rows, rounds, medians, pickUp: pickUp as PoolerData['pickUp'] }, rows };
}
