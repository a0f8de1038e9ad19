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
 * Then an idle relay: % of a core of the relay process and its backends over a quiet window.
 */
import pg from 'pg';
import { withRelay } from '../children.js';
import { DATABASE_URL, KEYS, PARTITIONS, benchSchema, createTopic, fillBacklog } from '../common.js';
import { CpuMeter, backendPids, brokerPid } from '../procCpu.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log, sleep, until } from '../util.js';

export interface CostArm {
  name: string;
  rowsPerSecond: number;
  /** CPU-seconds per 100,000 rows. */
  relayCpu: number;
  postgresCpu: number;
  brokerCpu: number;
}

export interface RelayCostData {
  rows: number;
  arms: CostArm[];
  idle: { seconds: number; relayPct: number; postgresPct: number };
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

async function idleArm(pool: pg.Pool, seconds: number): Promise<RelayCostData['idle']> {
  const { schema, drop } = await benchSchema(pool, 'benchidle');
  const clientId = 'bench-cost-idle';
  try {
    return await withRelay(
      schema,
      async (relay) => {
        await sleep(3_000); // shards taken, the probe backed off
        const backends = (): Promise<number[]> => backendPids(pool, clientId);
        const relayMeter = new CpuMeter(async () => (relay.process.pid ? [relay.process.pid] : []));
        const pgMeter = new CpuMeter(backends);
        await Promise.all([relayMeter.start(), pgMeter.start()]);
        await sleep(seconds * 1_000);
        const [relayCpu, postgresCpu] = await Promise.all([relayMeter.stop(), pgMeter.stop()]);
        return { seconds, relayPct: (100 * relayCpu) / seconds, postgresPct: (100 * postgresCpu) / seconds };
      },
      { clientId },
    );
  } finally {
    await drop();
  }
}

export async function relayCost(pool: pg.Pool, o: { rows: number; idleSeconds: number }): Promise<SectionResult<RelayCostData>> {
  const setups: ArmSetup[] = [
    { name: 'mark (analyzed)', analyze: true },
    { name: 'never analyzed', analyze: false },
    { name: 'held snapshot', analyze: true, holdSnapshot: true },
    { name: 'delete', analyze: true, relayOptions: { onPublish: 'delete' } },
  ];
  const arms: CostArm[] = [];
  for (const [i, s] of setups.entries()) arms.push(await drainArm(pool, o.rows, s, i));
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
  const idleTotal = idle.relayPct + idle.postgresPct;
  rows.push(
    row(S, `idle relay over ${idle.seconds} s: relay process + its backends, % of a core`, `${fmt(idle.relayPct, 2)} + ${fmt(idle.postgresPct, 2)} = ${fmt(idleTotal, 2)}`, '≤ 1.5', idleTotal <= 1.5),
  );
  return { data: { rows: o.rows, arms, idle }, rows };
}
