/**
 * 9. What relaying costs, per row and idle (issue 12): drains of the same backlog in four
 * arms, side by side in one run, each with rows/s and CPU-seconds per 100,000 rows of the
 * relay process, of its Postgres backends (by application_name, via pg_stat_activity →
 * pid → /proc/<pid>/stat) and of the broker (the java process listening on its port):
 *
 * - mark: defaults, a vacuumed and analyzed backlog (the reference);
 * - never analyzed: the same, on a table no ANALYZE has seen (autovacuum off for it);
 * - held snapshot: the reference with a REPEATABLE READ reader holding a snapshot (no
 *   transaction id of its own) from before the drain to its end;
 * - delete: `--on-publish delete`.
 *
 * Then steady load: pgbench writers offering 1,000 rows/s (8 clients, Poisson arrivals, one
 * autocommit insert each, created_at = clock_timestamp()) for `steadySeconds`, the relay as
 * its own process at defaults: CPU-seconds per 100,000 rows of the relay process, its
 * backends and the broker, and commit → Kafka ack p50/p99.
 *
 * Then an idle relay: % of a core of the relay process and its backends over a quiet
 * window; pick-up latency at low load (50 rows/s offered, as bench/wakeup.ts); and after
 * silence: single rows at random gaps of 0.2-1.5 s (so the horizon probe has backed off
 * before most of them), commit → Kafka ack.
 */
import pg from 'pg';
import { withRelay } from '../children.js';
import { DATABASE_URL, KEYS, PARTITIONS, PAYLOAD, benchSchema, createTopic, fillBacklog } from '../common.js';
import { CpuMeter, backendPids, brokerPid } from '../procCpu.js';
import { row, type Row, type SectionResult } from '../report.js';
import { pgbench, tps } from '../pgbench.js';
import { fmt, log, percentiles, sleep, until, type Percentiles } from '../util.js';

export interface CostArm {
  name: string;
  rowsPerSecond: number;
  /** CPU-seconds per 100,000 rows. */
  relayCpu: number;
  postgresCpu: number;
  brokerCpu: number;
}

export interface SteadyCost {
  offered: number;
  achieved: number;
  seconds: number;
  rows: number;
  /** CPU-seconds per 100,000 rows. */
  relayCpu: number;
  postgresCpu: number;
  brokerCpu: number;
  /** Relay backends, % of a core over the window. */
  postgresPct: number;
  ack: Percentiles;
}

export interface RelayCostData {
  rows: number;
  arms: CostArm[];
  steady: SteadyCost;
  /** The same steady load with a REPEATABLE READ snapshot held throughout. */
  steadyHeld: SteadyCost;
  /** pickUp: commit → ack at 50 rows/s; afterSilence: of single rows 0.2-1.5 s apart. */
  idle: { seconds: number; relayPct: number; postgresPct: number; pickUp: Percentiles; pickUpRows: number; afterSilence: Percentiles; pickUps: number };
}

type ArmSetup = { name: string; relayOptions?: Record<string, unknown>; analyze: boolean; holdSnapshot?: boolean };

async function drainArm(pool: pg.Pool, rows: number, arm: ArmSetup, index: number): Promise<CostArm> {
  const { schema, drop } = await benchSchema(pool, 'benchcost');
  const clientId = `bench-cost-${index}`;
  const reader = new pg.Client({ connectionString: DATABASE_URL, application_name: 'bench-cost-reader' });
  try {
    const topic = await createTopic(PARTITIONS);
    if (!arm.analyze) await pool.query(`ALTER TABLE "${schema}".outbox SET (autovacuum_enabled = false)`);
    log(`9. cost, ${arm.name}: filling a ${fmt(rows)}-row backlog`);
    await fillBacklog(pool, schema, topic, rows, KEYS, arm.analyze);
    if (arm.holdSnapshot) {
      // A report or pg_dump: a snapshot held, no transaction id (the horizon does not wait for it).
      await reader.connect();
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await reader.query(`SELECT count(*) FROM "${schema}".outbox_shard_leases`);
    }
    const backends = (): Promise<number[]> => backendPids(pool, clientId);
    const broker = brokerPid();
    return await withRelay(
      schema,
      async (relay) => {
        const relayMeter = new CpuMeter(async () => (relay.process.pid ? [relay.process.pid] : []));
        const pgMeter = new CpuMeter(backends);
        const brokerMeter = new CpuMeter(async () => (broker ? [broker] : []));
        // From the first acknowledged batch on, like rows/s: the child's start-up is not per row.
        await until(`9. cost, ${arm.name}: first batch`, () => relay.acks.length > 0, 600_000, 10);
        const ackedBefore = relay.acks.length;
        await Promise.all([relayMeter.start(), pgMeter.start(), brokerMeter.start()]);
        await until(`9. cost, ${arm.name}: drained`, () => relay.acks.length >= rows, 1_800_000, 100);
        const [relayCpu, postgresCpu, brokerCpu] = await Promise.all([relayMeter.stop(), pgMeter.stop(), brokerMeter.stop()]);
        const times = relay.acks.map((a) => a[1]).sort((a, b) => a - b);
        const first = times[0]!;
        const seconds = (times[times.length - 1]! - first) / 1000;
        const per = 100_000 / (relay.acks.length - ackedBefore);
        return {
          name: arm.name,
          rowsPerSecond: times.filter((t) => t > first).length / seconds,
          relayCpu: relayCpu * per,
          postgresCpu: postgresCpu * per,
          brokerCpu: broker ? brokerCpu * per : NaN,
        };
      },
      { clientId, ...arm.relayOptions },
    );
  } finally {
    await reader.end().catch(() => undefined);
    await drop();
  }
}

const STEADY_RATE = 1_000;
/** Low load for pick-up latency, as bench/wakeup.ts offers it. */
const LOW_RATE = 50;

/** Rows inserted by `pgbench` since `afterId`, id → commit time (ms since epoch). */
export async function committedSince(pool: pg.Pool, schema: string, afterId: number): Promise<Map<number, number>> {
  const { rows } = await pool.query<{ id: string; t: number }>(`SELECT id, extract(epoch FROM created_at) * 1000 AS t FROM "${schema}".outbox WHERE id > $1`, [afterId]);
  return new Map(rows.map((r) => [Number(r.id), Number(r.t)]));
}

/** Commit → first ack of each row, sorted. */
export function ackLatencies(committed: Map<number, number>, acks: Array<[number, number]>): number[] {
  const firstAck = new Map<number, number>();
  for (const [id, t] of acks) if (!firstAck.has(id)) firstAck.set(id, t);
  const out: number[] = [];
  for (const [id, t] of committed) {
    const a = firstAck.get(id);
    if (a !== undefined) out.push(Math.max(0, a - t));
  }
  return out.sort((a, b) => a - b);
}

export async function maxId(pool: pg.Pool, schema: string): Promise<number> {
  const { rows } = await pool.query<{ m: string | null }>(`SELECT max(id) AS m FROM "${schema}".outbox`);
  return Number(rows[0]!.m ?? 0);
}

/**
 * The steady arm; with `holdSnapshot`, a REPEATABLE READ reader of another table holds its
 * snapshot from before the writers start to after the last row is acknowledged (a report,
 * a pg_dump: the xmin horizon held, no transaction id, so the relay's own horizon does not
 * wait for it). Postgres can then neither remove the versions the marks leave behind nor
 * mark their index entries dead, and every claim that scans the unsent rows meets them
 * (issue 36 item 3).
 */
export async function steadyArm(pool: pg.Pool, seconds: number, holdSnapshot = false): Promise<SteadyCost> {
  const { schema, drop } = await benchSchema(pool, 'benchsteady');
  const clientId = holdSnapshot ? 'bench-cost-steady-held' : 'bench-cost-steady';
  const reader = new pg.Client({ connectionString: DATABASE_URL });
  let held = false;
  try {
    if (holdSnapshot) {
      await reader.connect();
      await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await reader.query('SELECT count(*) FROM pg_class');
      held = true;
    }
    const topic = await createTopic(PARTITIONS);
    const broker = brokerPid();
    return await withRelay(
      schema,
      async (relay) => {
        await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
        await until('9. cost, steady: the warm-up row through', () => relay.acks.length > 0, 60_000, 10);
        const before = await maxId(pool, schema);
        const relayMeter = new CpuMeter(async () => (relay.process.pid ? [relay.process.pid] : []));
        const pgMeter = new CpuMeter(() => backendPids(pool, clientId));
        const brokerMeter = new CpuMeter(async () => (broker ? [broker] : []));
        log(`9. cost, steady${holdSnapshot ? ', a snapshot held' : ''}: ${fmt(STEADY_RATE)} rows/s for ${seconds} s`);
        const started = Date.now();
        await Promise.all([relayMeter.start(), pgMeter.start(), brokerMeter.start()]);
        const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`;
        const achieved = tps(await pgbench(script, ['-c', '8', '-j', '2', '-R', String(STEADY_RATE), '-T', String(seconds)]));
        const committed = await committedSince(pool, schema, before);
        await until(
          '9. cost, steady: every row acknowledged',
          () => {
            const seen = new Set(relay.acks.map((a) => a[0]));
            return [...committed.keys()].every((id) => seen.has(id));
          },
          300_000,
          50,
        );
        const [relayCpu, postgresCpu, brokerCpu] = await Promise.all([relayMeter.stop(), pgMeter.stop(), brokerMeter.stop()]);
        const windowSeconds = (Date.now() - started) / 1000;
        // The harness checks itself: the snapshot was still held when the last row was acknowledged.
        if (holdSnapshot) {
          const { rows } = await reader.query<{ open: boolean }>(`SELECT now() < clock_timestamp() - interval '${Math.floor(seconds / 2)} seconds' AS open`);
          if (!rows[0]!.open) throw new Error(`9. cost, steady, a snapshot held: the reader's transaction is younger than ${Math.floor(seconds / 2)} s`);
        }
        const per = 100_000 / committed.size;
        return {
          offered: STEADY_RATE,
          achieved,
          seconds,
          rows: committed.size,
          relayCpu: relayCpu * per,
          postgresCpu: postgresCpu * per,
          brokerCpu: broker ? brokerCpu * per : NaN,
          postgresPct: (100 * postgresCpu) / windowSeconds,
          ack: percentiles(ackLatencies(committed, relay.acks)),
        };
      },
      { clientId },
    );
  } finally {
    if (held) await reader.query('ROLLBACK').catch(() => undefined);
    if (holdSnapshot) await reader.end().catch(() => undefined);
    await drop();
  }
}

export async function idleArm(pool: pg.Pool, seconds: number): Promise<RelayCostData['idle']> {
  const { schema, drop } = await benchSchema(pool, 'benchidle');
  const clientId = 'bench-cost-idle';
  try {
    const topic = await createTopic(PARTITIONS);
    return await withRelay(
      schema,
      async (relay) => {
        // One row through first: an idle relay in production has published before, so its
        // producer is connected and knows a topic (its metadata refreshes count).
        await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
        await until('9. cost, idle: the warm-up row through', () => relay.acks.length > 0, 60_000, 10);
        await sleep(3_000); // shards taken, the probe backed off
        const backends = (): Promise<number[]> => backendPids(pool, clientId);
        const relayMeter = new CpuMeter(async () => (relay.process.pid ? [relay.process.pid] : []));
        const pgMeter = new CpuMeter(backends);
        await Promise.all([relayMeter.start(), pgMeter.start()]);
        await sleep(seconds * 1_000);
        const [relayCpu, postgresCpu] = await Promise.all([relayMeter.stop(), pgMeter.stop()]);
        // Pick-up at low load, as bench/wakeup.ts measures it: pgbench offering 50 rows/s
        // (Poisson arrivals, one autocommit insert each, created_at = clock_timestamp()).
        const beforeLow = await maxId(pool, schema);
        const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`;
        await pgbench(script, ['-c', '2', '-j', '1', '-R', String(LOW_RATE), '-T', String(seconds)]);
        const low = await committedSince(pool, schema, beforeLow);
        await until('9. cost, idle: the 50 rows/s acknowledged', () => ackLatencies(low, relay.acks).length === low.size, 60_000, 20);
        const pickUp = percentiles(ackLatencies(low, relay.acks));
        // After silence: one row at a time, each after a random gap (seeded, so runs
        // compare): most find the probe backed off.
        const before = await maxId(pool, schema);
        let seed = 12345;
        const random = (): number => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
        const pickUps = Math.max(10, seconds * 3);
        for (let i = 0; i < pickUps; i++) {
          await sleep(200 + random() * 1_300);
          await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ($1, $2, $3, clock_timestamp())`, [topic, `key-${i}`, PAYLOAD]);
        }
        const committed = await committedSince(pool, schema, before);
        await until('9. cost, idle: the pick-up rows acknowledged', () => ackLatencies(committed, relay.acks).length === committed.size, 60_000, 20);
        return {
          seconds,
          relayPct: (100 * relayCpu) / seconds,
          postgresPct: (100 * postgresCpu) / seconds,
          pickUp,
          pickUpRows: low.size,
          afterSilence: percentiles(ackLatencies(committed, relay.acks)),
          pickUps,
        };
      },
      { clientId },
    );
  } finally {
    await drop();
  }
}

/**
 * @param o.rows rows per drain arm; o.idleSeconds the idle window; o.steadySeconds the
 *   steady-load window (default twice the idle window: 10 s quick, 20 s full).
 */
export async function relayCost(pool: pg.Pool, o: { rows: number; idleSeconds: number; steadySeconds?: number }): Promise<SectionResult<RelayCostData>> {
  const setups: ArmSetup[] = [
    { name: 'mark (analyzed)', analyze: true },
    { name: 'never analyzed', analyze: false },
    { name: 'held snapshot', analyze: true, holdSnapshot: true },
    { name: 'delete', analyze: true, relayOptions: { onPublish: 'delete' } },
  ];
  const arms: CostArm[] = [];
  for (const [i, s] of setups.entries()) arms.push(await drainArm(pool, o.rows, s, i));
  const steady = await steadyArm(pool, o.steadySeconds ?? 2 * o.idleSeconds);
  const steadyHeld = await steadyArm(pool, o.steadySeconds ?? 2 * o.idleSeconds, true);
  const idle = await idleArm(pool, o.idleSeconds);
  const S = '9. cost per row';
  const ref = arms[0]!;
  const rows: Row[] = arms.map((a) =>
    row(
      S,
      `drain ${fmt(o.rows)} rows, ${a.name}`,
      `${fmt(a.rowsPerSecond)} rows/s; CPU-s per 100k rows: relay ${fmt(a.relayCpu, 2)}, Postgres ${fmt(a.postgresCpu, 2)}, broker ${fmt(a.brokerCpu, 2)}`,
    ),
  );
  const ratio = (name: string): number => arms.find((a) => a.name === name)!.rowsPerSecond / ref.rowsPerSecond;
  rows.push(row(S, 'held snapshot / without', fmt(ratio('held snapshot'), 2), '≥ 0.9', ratio('held snapshot') >= 0.9));
  rows.push(row(S, 'never analyzed / analyzed', fmt(ratio('never analyzed'), 2), '≥ 0.9', ratio('never analyzed') >= 0.9));
  rows.push(row(S, 'delete / mark', fmt(ratio('delete'), 2), '≥ 1.0', ratio('delete') >= 1.0));
  rows.push(row(S, 'Postgres CPU-s per 100k rows, drain (mark)', fmt(ref.postgresCpu, 2), '≤ 1.5', ref.postgresCpu <= 1.5));
  rows.push(row(S, 'relay process CPU-s per 100k rows, drain (mark)', fmt(ref.relayCpu, 2), '≤ 3', ref.relayCpu <= 3));
  const st = steady;
  rows.push(
    row(
      S,
      `steady ${fmt(st.offered)} rows/s offered (${fmt(st.achieved)} achieved) for ${st.seconds} s, relay at defaults`,
      `CPU-s per 100k rows: relay ${fmt(st.relayCpu, 2)}, Postgres ${fmt(st.postgresCpu, 2)} (${fmt(st.postgresPct, 1)} % of a core), broker ${fmt(st.brokerCpu, 2)}`,
    ),
  );
  rows.push(row(S, 'Postgres CPU-s per 100k rows, steady 1,000 rows/s', fmt(st.postgresCpu, 2), '≤ 12', st.postgresCpu <= 12));
  const sh = steadyHeld;
  rows.push(
    row(
      S,
      `steady ${fmt(sh.offered)} rows/s offered (${fmt(sh.achieved)} achieved) for ${sh.seconds} s, a REPEATABLE READ snapshot held throughout, relay at defaults (mark)`,
      `CPU-s per 100k rows: relay ${fmt(sh.relayCpu, 2)}, Postgres ${fmt(sh.postgresCpu, 2)} (${fmt(sh.postgresPct, 1)} % of a core); commit → ack p50 ${fmt(sh.ack.p50, 1)} / p99 ${fmt(sh.ack.p99, 1)} ms`,
    ),
  );
  const heldRatio = sh.postgresCpu / st.postgresCpu;
  rows.push(row(S, 'Postgres CPU-s per row, steady: a snapshot held / none (issue 36 item 3)', fmt(heldRatio, 2), '≤ 1.3', heldRatio <= 1.3));
  rows.push(row(S, 'commit → ack at steady 1,000 rows/s', `p50 ${fmt(st.ack.p50, 1)} / p99 ${fmt(st.ack.p99, 1)} ms`, 'p50 ≤ 8, p99 ≤ 20', st.ack.p50 <= 8 && st.ack.p99 <= 20));
  const idleTotal = idle.relayPct + idle.postgresPct;
  rows.push(
    row(S, `idle relay over ${idle.seconds} s: relay process + its backends, % of a core`, `${fmt(idle.relayPct, 2)} + ${fmt(idle.postgresPct, 2)} = ${fmt(idleTotal, 2)}`, '≤ 1.0', idleTotal <= 1.0),
  );
  rows.push(
    row(S, `pick-up at ${LOW_RATE} rows/s offered (${fmt(idle.pickUpRows)} rows): commit → ack`, `p50 ${fmt(idle.pickUp.p50, 1)} / p95 ${fmt(idle.pickUp.p95, 1)} / p99 ${fmt(idle.pickUp.p99, 1)} ms`, 'p50 ≤ 15', idle.pickUp.p50 <= 15),
  );
  rows.push(
    // Issue 21's target 4 is on the first row after idle, which this arm measures.
    row(S, `pick-up after silence (${idle.pickUps} single rows, 0.2-1.5 s apart): commit → ack`, `p50 ${fmt(idle.afterSilence.p50, 1)} / p95 ${fmt(idle.afterSilence.p95, 1)} ms`, 'p50 ≤ 15', idle.afterSilence.p50 <= 15),
  );
  return { data: { rows: o.rows, arms, steady, steadyHeld, idle }, rows };
}
