/**
 * 19. Many tenants (issue 37's targets): `outbox-relay run` with a tenant rule
 * (docs/tenants.md), the command as deployed (defaults: budget 30, one batch in flight
 * per tenant), in a process of its own.
 *
 * Schema tenants: `idleTenants` schemas of the bench database, each migrated with the
 * insert trigger, served by `--tenant-schemas`. Every tenant writes to one shared topic
 * (`--topic-template {topic}`, `--key-template {tenant}:{key}`) created with
 * message.timestamp.type=LogAppendTime, so that a message's timestamp is when the broker
 * appended it: commit → Kafka is that minus the time the bench's COMMIT returned (one
 * clock, one machine).
 * 1. idle: `idleSeconds` with no row written: % of a core of the relay process and of its
 *    Postgres backends (application_name `<clientId>:…`, /proc utime + stime, backends
 *    sampled every second so that those born in the window count), and the most
 *    connections it held (pg_stat_activity, every second).
 * 2. a row in any one of them: single-row transactions into tenants picked at random,
 *    `rowRate` a second for `latencySeconds`: commit → Kafka p50 and p99.
 * 3. a backlog: `backlogRows` rows committed in one tenant, then the same single rows into
 *    the other tenants while it drains: their p99, and the backlog's drain rate.
 * Database tenants: `databases` databases of the server, `busyDatabases` of them written at
 * `busyRate` rows/s each for `busySeconds`, served by `--tenant-databases`: every row sent
 * and on the topic, the time the last one took after the writers stopped, the most
 * connections held.
 *
 * It checks itself and throws: every row written is in the topic (by message id), the
 * relay process runs to the end, the rule found every tenant (the control connection's
 * application_name is present and the tenant count in its log line matches).
 */
import pg from 'pg';
import { DATABASE_URL, kafka, name, PAYLOAD } from '../common.js';
import { cpuTicks, TICKS_PER_SECOND } from '../procCpu.js';
import { startTenantRun, type RunProcess } from '../multiOutboxRelays.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log, percentile, sleep, until, wall } from '../util.js';
import { migrate } from '../../src/commands/migrate.js';
import { HEADERS } from '../../src/shared/kafka.js';

const S = '19. many tenants';
/** The budget the rows are judged against: the tenant relay's default. */
const BUDGET = 30;

export interface TenantsSizes {
  idleTenants: number;
  idleSeconds: number;
  rowRate: number;
  latencySeconds: number;
  backlogRows: number;
  databases: number;
  busyDatabases: number;
  busyRate: number;
  busySeconds: number;
}

export interface TenantsData extends TenantsSizes {
  idle: { relayPct: number; postgresPct: number; connections: number };
  anyTenant: { rows: number; p50: number; p99: number; max: number };
  backlog: { rows: number; rowsPerSecond: number; others: number; p50: number; p99: number };
  databasesRun: { rows: number; lastAfterWritersMs: number; connections: number; relayCpuPer100k: number };
}

/** The relay's backends: application_name `<clientId>:…`. */
async function backends(pool: pg.Pool, clientId: string): Promise<number[]> {
  const { rows } = await pool.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE left(application_name, length($1) + 1) = $1 || ':'", [clientId]);
  return rows.map((r) => r.pid);
}

/** CPU ticks of processes over a window; a pid first seen inside it counts from its birth. */
class Ticks {
  private readonly first = new Map<number, number>();
  private readonly last = new Map<number, number>();
  private recorded = false;
  constructor(private readonly bornInside: boolean) {}
  record(pids: number[]): void {
    for (const pid of pids) {
      const t = cpuTicks(pid);
      if (t === undefined) continue;
      if (!this.first.has(pid)) this.first.set(pid, this.bornInside && this.recorded ? 0 : t);
      this.last.set(pid, t);
    }
    this.recorded = true;
  }
  seconds(): number {
    let sum = 0;
    for (const [pid, t] of this.last) sum += t - this.first.get(pid)!;
    return sum / TICKS_PER_SECOND;
  }
}

/** The shared topic, its timestamps the broker's append times. */
async function appendTimeTopic(): Promise<string> {
  const topic = name('benchtn');
  const admin = kafka().admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 6, configEntries: [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  return topic;
}

/** Append time of each message id read from the topic, until every one of `ids` is seen. */
async function appendTimes(topic: string, ids: Set<string>, timeoutMs: number): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  const consumer = kafka().consumer({ groupId: name('benchtn-reader'), maxWaitTimeInMs: 100 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const id = message.headers?.[HEADERS.messageId]?.toString();
        if (id && !seen.has(id)) seen.set(id, Number(message.timestamp));
      },
    });
    await until(`${ids.size} rows on ${topic}`, () => [...ids].every((id) => seen.has(id)), timeoutMs, 200);
  } finally {
    await consumer.disconnect();
  }
  return seen;
}

/** Single-row transactions at `rate` a second for `seconds` into tenants `pick()` names; the COMMIT's return time of each. */
async function singleRows(pool: pg.Pool, topic: string, rate: number, seconds: number, pick: () => string): Promise<Map<string, number>> {
  const committed = new Map<string, number>();
  const start = wall();
  const total = Math.round(rate * seconds);
  const inFlight: Promise<void>[] = [];
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - wall();
    if (wait > 0) await sleep(wait);
    const schema = pick();
    inFlight.push(
      pool.query<{ message_id: string }>(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, $2, $3) RETURNING message_id`, [topic, `k${i % 50}`, PAYLOAD]).then((r) => {
        committed.set(r.rows[0]!.message_id, wall());
      }),
    );
  }
  await Promise.all(inFlight);
  return committed;
}

function latencies(committed: Map<string, number>, appended: Map<string, number>): number[] {
  return [...committed].map(([id, at]) => appended.get(id)! - at).sort((a, b) => a - b);
}

async function withRelay<T>(args: string[], clientId: string, expectTenants: number, work: (relay: RunProcess) => Promise<T>): Promise<T> {
  const relay = startTenantRun(args, clientId);
  try {
    await until('the tenant relay started', () => /"msg":"tenant relay started"/.test(relay.tail()) || relay.exited(), 120_000, 100);
    if (relay.exited()) throw new Error(`${S}: the relay exited with ${relay.exitCode()}:\n${relay.tail()}`);
    const found = Number(/"tenants":(\d+)[^\n]*"msg":"tenant relay started"/.exec(relay.tail())?.[1]);
    if (found !== expectTenants) throw new Error(`${S}: the rule found ${found} tenants, ${expectTenants} expected`);
    const result = await work(relay);
    if (relay.exited()) throw new Error(`${S}: the relay exited with ${relay.exitCode()} during the run:\n${relay.tail()}`);
    return result;
  } finally {
    const code = await relay.stop();
    if (code !== 0) log(`${S}: relay exit code ${code} after SIGTERM (0 expected)`);
  }
}

async function schemaTenants(pool: pg.Pool, o: TenantsSizes): Promise<Pick<TenantsData, 'idle' | 'anyTenant' | 'backlog'>> {
  const prefix = name('bt').replace(/-/g, '_');
  const schemas = Array.from({ length: o.idleTenants }, (_, i) => `${prefix}_${String(i).padStart(4, '0')}`);
  const started = wall();
  const client = await pool.connect();
  try {
    for (const schema of schemas) await migrate({ client, schema, notifyOnInsert: true });
  } finally {
    client.release();
  }
  log(`${S}: ${schemas.length} tenant schemas migrated in ${fmt((wall() - started) / 1000, 1)} s`);
  try {
    const topic = await appendTimeTopic();
    const clientId = name('bench-tn');
    return await withRelay(['--tenant-schemas', `^${prefix}_`, '--topic-template', '{topic}', '--key-template', '{tenant}:{key}'], clientId, schemas.length, async (relay) => {
      // 1. Idle: after the start-up sweep has settled.
      await sleep(5_000);
      const relayTicks = new Ticks(false);
      const backendTicks = new Ticks(true);
      let connections = 0;
      const t0 = wall();
      while (wall() - t0 < o.idleSeconds * 1000) {
        const pids = await backends(pool, clientId);
        connections = Math.max(connections, pids.length);
        relayTicks.record([relay.pid]);
        backendTicks.record(pids);
        await sleep(1_000);
      }
      const seconds = (wall() - t0) / 1000;
      const idle = { relayPct: (relayTicks.seconds() / seconds) * 100, postgresPct: (backendTicks.seconds() / seconds) * 100, connections };
      log(`${S}: idle ${fmt(seconds)} s: relay ${fmt(idle.relayPct, 2)} % + backends ${fmt(idle.postgresPct, 2)} % of a core, ${connections} connections`);

      // 2. A row in any one of them.
      const random = (): string => schemas[Math.floor(Math.random() * schemas.length)]!;
      const any = await singleRows(pool, topic, o.rowRate, o.latencySeconds, random);
      const anyLat = latencies(any, await appendTimes(topic, new Set(any.keys()), 120_000));
      const anyTenant = { rows: anyLat.length, p50: percentile(anyLat, 50), p99: percentile(anyLat, 99), max: anyLat[anyLat.length - 1]! };
      log(`${S}: a row in any tenant: p50 ${fmt(anyTenant.p50)} / p99 ${fmt(anyTenant.p99)} ms`);

      // 3. One tenant's backlog, the others' single rows meanwhile.
      const big = schemas[0]!;
      for (let done = 0; done < o.backlogRows; done += 100_000) {
        await pool.query(`INSERT INTO "${big}".outbox (topic, key, payload) SELECT $1, 'b' || (i % 1000), $2::jsonb FROM generate_series(1, $3::int) i`, [topic, PAYLOAD, Math.min(100_000, o.backlogRows - done)]);
      }
      const drainFrom = wall();
      await until('the backlog being published', async () => (await pool.query(`SELECT EXISTS (SELECT 1 FROM "${big}".outbox WHERE sent_at IS NOT NULL) AS x`)).rows[0].x === true, 60_000, 50);
      const others: Map<string, number> = new Map();
      let drainedAt = 0;
      while (drainedAt === 0) {
        for (const [id, at] of await singleRows(pool, topic, o.rowRate, 5, () => schemas[1 + Math.floor(Math.random() * (schemas.length - 1))]!)) others.set(id, at);
        const left = (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM (SELECT 1 FROM "${big}".outbox WHERE sent_at IS NULL LIMIT 1) x`)).rows[0]!.n;
        if (left === 0) drainedAt = wall();
        if (wall() - drainFrom > 1_800_000) throw new Error(`${S}: the ${o.backlogRows}-row backlog was not drained in 30 minutes`);
      }
      const otherLat = latencies(others, await appendTimes(topic, new Set(others.keys()), 120_000));
      const backlog = { rows: o.backlogRows, rowsPerSecond: o.backlogRows / ((drainedAt - drainFrom) / 1000), others: otherLat.length, p50: percentile(otherLat, 50), p99: percentile(otherLat, 99) };
      log(`${S}: backlog ${fmt(backlog.rowsPerSecond)} rows/s; the others meanwhile p50 ${fmt(backlog.p50)} / p99 ${fmt(backlog.p99)} ms`);
      return { idle, anyTenant, backlog };
    });
  } finally {
    for (let i = 0; i < schemas.length; i += 100) await pool.query(`DROP SCHEMA IF EXISTS ${schemas.slice(i, i + 100).map((s) => `"${s}"`).join(', ')} CASCADE`).catch(() => undefined);
  }
}

async function databaseTenants(pool: pg.Pool, o: TenantsSizes): Promise<TenantsData['databasesRun']> {
  const prefix = name('btd').replace(/-/g, '_');
  const databases = Array.from({ length: o.databases }, (_, i) => `${prefix}_${String(i).padStart(3, '0')}`);
  const urlOf = (db: string): string => Object.assign(new URL(DATABASE_URL), { pathname: `/${db}` }).toString();
  const started = wall();
  try {
    for (const db of databases) {
      await pool.query(`CREATE DATABASE "${db}"`);
      await migrate({ databaseUrl: urlOf(db), schema: 'public' });
    }
    log(`${S}: ${databases.length} tenant databases created and migrated in ${fmt((wall() - started) / 1000, 1)} s`);
    const topic = await appendTimeTopic();
    const clientId = name('bench-tnd');
    return await withRelay(['--tenant-databases', `^${prefix}_`, '--topic-template', '{topic}', '--key-template', '{tenant}:{key}'], clientId, databases.length, async (relay) => {
      const busy = databases.slice(0, o.busyDatabases);
      const pools = busy.map((db) => new pg.Pool({ connectionString: urlOf(db), max: 2 }));
      let connections = 0;
      let sampling = true;
      const relayTicks = new Ticks(false);
      const sampler = (async () => {
        while (sampling) {
          connections = Math.max(connections, (await backends(pool, clientId)).length);
          relayTicks.record([relay.pid]);
          await sleep(250);
        }
      })();
      try {
        const ids = new Set<string>();
        await Promise.all(
          pools.map(async (p) => {
            const start = wall();
            const perSecond = o.busyRate / 10;
            for (let tick = 0; tick < o.busySeconds * 10; tick++) {
              const wait = start + tick * 100 - wall();
              if (wait > 0) await sleep(wait);
              const { rows } = await p.query<{ message_id: string }>(`INSERT INTO outbox (topic, key, payload) SELECT $1, 'k' || (i % 50), $2::jsonb FROM generate_series(1, $3::int) i RETURNING message_id`, [topic, PAYLOAD, perSecond]);
              for (const r of rows) ids.add(r.message_id);
            }
          }),
        );
        const writersDone = wall();
        const appended = await appendTimes(topic, ids, 300_000);
        const last = Math.max(...appended.values());
        sampling = false;
        await sampler;
        const rows = ids.size;
        log(`${S}: ${databases.length} databases, ${busy.length} busy: ${rows} rows delivered, the last ${fmt(last - writersDone)} ms after the writers stopped; ${connections} connections at most`);
        return { rows, lastAfterWritersMs: last - writersDone, connections, relayCpuPer100k: (relayTicks.seconds() * 100_000) / rows };
      } finally {
        sampling = false;
        await sampler;
        for (const p of pools) await p.end();
      }
    });
  } finally {
    for (const db of databases) await pool.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`).catch(() => undefined);
  }
}

export async function tenants(pool: pg.Pool, o: TenantsSizes): Promise<SectionResult<TenantsData>> {
  const schemasPart = await schemaTenants(pool, o);
  const databasesRun = await databaseTenants(pool, o);
  const { idle, anyTenant, backlog } = schemasPart;
  const idleTotal = idle.relayPct + idle.postgresPct;
  const rows: Row[] = [
    row(S, `${fmt(o.idleTenants)} idle schema tenants, ${o.idleSeconds} s: relay process + its backends, % of a core`, `${fmt(idle.relayPct, 2)} + ${fmt(idle.postgresPct, 2)} = ${fmt(idleTotal, 2)}`, '≤ 2', idleTotal <= 2),
    row(S, `${fmt(o.idleTenants)} idle schema tenants: most Postgres connections held`, `${idle.connections}`, `≤ ${BUDGET}`, idle.connections <= BUDGET),
    row(S, `a row in any one of them (${o.rowRate} rows/s into random tenants, ${anyTenant.rows} rows): commit → Kafka`, `p50 ${fmt(anyTenant.p50)} / p99 ${fmt(anyTenant.p99)} ms (max ${fmt(anyTenant.max)})`, 'p50 ≤ 100, p99 ≤ 1000', anyTenant.p50 <= 100 && anyTenant.p99 <= 1_000),
    row(S, `one tenant draining a ${fmt(backlog.rows)}-row backlog: the others' rows (${backlog.others}) commit → Kafka`, `p50 ${fmt(backlog.p50)} / p99 ${fmt(backlog.p99)} ms; the backlog at ${fmt(backlog.rowsPerSecond)} rows/s`, 'p99 ≤ 1000', backlog.p99 <= 1_000),
    row(
      S,
      `${o.databases} tenant databases, ${o.busyDatabases} busy at ${o.busyRate} rows/s each for ${o.busySeconds} s: delivered, connections`,
      `${fmt(databasesRun.rows)} rows, all on the topic, the last ${fmt(databasesRun.lastAfterWritersMs)} ms after the writers stopped; ${databasesRun.connections} connections at most; relay ${fmt(databasesRun.relayCpuPer100k, 2)} CPU-s per 100k rows`,
      `all, ≤ ${BUDGET} connections`,
      databasesRun.connections <= BUDGET,
    ),
  ];
  return { rows, data: { ...o, idle, anyTenant, backlog, databasesRun } };
}
