/**
 * 10. Against Debezium: the relay (its own process, defaults) and Debezium 3.6.1 embedded
 * (bench/debezium/DebeziumRunner.java: the Postgres connector with pgoutput and a
 * publication on the outbox table only, the outbox EventRouter SMT, an idempotent
 * KafkaProducer with acks=all) side by side on one private Postgres cluster with
 * wal_level=logical (scripts/localPostgres.ts) and the same broker. Each arm gets a table,
 * topic (and for Debezium a slot and publication) of its own, made fresh; the two systems
 * alternate, the one going first swapped every round.
 *
 * - drain: a committed, vacuumed and checkpointed backlog of ~200-byte JSON rows over
 *   10,000 keys, the process started after it: rows/s from the first Kafka acknowledgement
 *   to the last, CPU-seconds per 100,000 rows over that window of the process, of its
 *   Postgres backends (the relay's by application_name `<clientId>:…`, Debezium's
 *   `Debezium …`, walsender included), of all of Postgres but the bench's own connections
 *   (autovacuum, WAL writer, checkpointer: what the arm makes Postgres do) and of the
 *   broker; peak RSS (VmHWM). Every row must be in the topic (its offsets), else it throws.
 * - steady: pgbench writers offering 1,000 rows/s (8 clients, Poisson arrivals, one
 *   autocommit insert each, clock_timestamp() in the payload as `t`) for `steadySeconds`,
 *   into topics with message.timestamp.type=LogAppendTime: commit → broker append is the
 *   record's broker timestamp minus `t`, read back with a consumer after the window (so the
 *   reading does not load the window). The same load runs 5 s before the window, unmeasured,
 *   so that neither JIT's warm-up is counted. Debezium with poll.interval.ms=10 each round,
 *   then once at its defaults (500 ms).
 * - idle: % of a core of the process and its backends over a quiet window, after a
 *   warm-up row went through.
 */
import pg from 'pg';
import { Kafka, logLevel } from 'kafkajs';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrate } from '../../src/commands/migrate.js';
import { startLocalPostgres } from '../../scripts/localPostgres.js';
import { startChild } from '../children.js';
import { KEYS, PARTITIONS, brokers, fillBacklog, name } from '../common.js';
import { DEBEZIUM_VERSION, startDebezium } from '../debezium/runner.js';
import { CpuMeter, backendPids, brokerPid } from '../procCpu.js';
import { pgbench, tps } from '../pgbench.js';
import { PROFILES } from '../profile.js';
import type { SectionResult } from '../report.js';
import { fmt, log, medianOf, percentiles, sleep, until } from '../util.js';
import { S, STEADY_RATE, TUNED_POLL_MS, tableRows, type DebeziumData, type DrainFigures, type IdleFigures, type SteadyFigures, type System } from './debeziumTable.js';

/** Seconds of the same load before the steady window, to warm both JITs. */
const WARM_UP_SECONDS = 5;
/** The bench's own connections to the private cluster, left out of "all of Postgres". */
const ADMIN_APP = 'bench-dbz-admin';
/** ~200 bytes of JSON, as bench/common.ts's backlog; `t` (ms) only in the steady arm. */
const payloadSql = (t: boolean): string => `jsonb_build_object(${t ? `'t', extract(epoch FROM clock_timestamp()) * 1000, ` : `'i', i, `}'type', 'order_updated', 'pad', repeat('x', 150))`;

/** One arm's table and process: the relay's migrated outbox, or Debezium's outboxevent with its slot. */
interface Subject {
  system: System;
  fill(topic: string, rows: number): Promise<void>;
  /** A pgbench script inserting one row for `topic` per transaction. */
  script(topic: string): string;
  insertOne(topic: string): Promise<void>;
  /** Rows in the arm's table. */
  count(): Promise<number>;
  start(): Promise<Running>;
  drop(): Promise<void>;
}

interface Running {
  pid: number;
  acked(): number;
  /** Rows/s from the first acknowledgement to the last (the first batch's rows not counted). */
  drainRate(): number;
  /** Rows/s from the acknowledgement of row `rows / 2` to the last. */
  secondHalfRate(rows: number): number;
  backends(): Promise<number[]>;
  /** Throws if the process exited before stop(): called by every wait on it. */
  check(): void;
  stop(): Promise<void>;
}

class Bench {
  readonly pool: pg.Pool;
  private readonly admin;
  private armNo = 0;
  private readonly running = new Set<CpuMeter>();

  constructor(readonly url: string) {
    this.pool = new pg.Pool({ connectionString: url, max: 6, application_name: ADMIN_APP });
    this.admin = new Kafka({ clientId: 'bench-dbz', brokers: brokers(), logLevel: logLevel.NOTHING }).admin();
  }

  async connect(): Promise<void> {
    await this.admin.connect();
  }

  async close(): Promise<void> {
    await this.admin.disconnect();
    await this.pool.end();
  }

  async topic(logAppendTime: boolean): Promise<string> {
    const topic = name('benchdbz');
    const configEntries = logAppendTime ? [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] : [];
    await this.admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS, configEntries }], waitForLeaders: true });
    return topic;
  }

  async delivered(topic: string): Promise<number> {
    return (await this.admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  }

  /** Everything in Postgres but the bench's own connections (admin pool, pgbench). */
  async postgresPids(): Promise<number[]> {
    const { rows } = await this.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name NOT IN ($1, 'pgbench')`, [ADMIN_APP]);
    return rows.map((r) => r.pid);
  }

  ours(): Subject {
    const schema = name('dbzcmp_relay');
    const clientId = `bench-dbz-relay-${++this.armNo}`;
    const { pool, url } = this;
    return {
      system: 'ours',
      fill: async (topic, rows) => {
        await migrate({ databaseUrl: url, schema });
        await fillBacklog(pool, schema, topic, rows, KEYS);
      },
      script: (topic) => `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload) VALUES ('${topic}', 'key-' || :k, ${payloadSql(true)});\n`,
      insertOne: async (topic) => void (await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic])),
      count: async () => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outbox`)).rows[0]!.n),
      start: async () => {
        // The child's DATABASE_URL points it at the private cluster.
        const relay = startChild('relay', { BENCH_SCHEMA: schema, DATABASE_URL: url, BENCH_RELAY_OPTIONS: JSON.stringify({ clientId }) });
        let stopping = false;
        let exitError: Error | undefined;
        relay.process.once('exit', (code) => {
          if (!stopping) exitError = new Error(`the relay process exited (${code}) before it was stopped`);
        });
        await relay.ready;
        return {
          pid: relay.process.pid!,
          acked: () => relay.acks.length,
          drainRate: () => {
            // As bench/relayDrain.ts: the rows after the first acknowledgement over the time after it.
            const times = relay.acks.map((a) => a[1]);
            const first = times.reduce((a, b) => Math.min(a, b), Infinity);
            const last = times.reduce((a, b) => Math.max(a, b), -Infinity);
            return times.filter((t) => t > first).length / ((last - first) / 1000);
          },
          secondHalfRate: (rows) => {
            const times = relay.acks.map((a) => a[1]).sort((a, b) => a - b);
            const half = Math.floor(rows / 2);
            const from = times[half - 1]!;
            return (times.length - half) / ((times[times.length - 1]! - from) / 1000);
          },
          backends: () => backendPids(pool, clientId),
          check: () => {
            if (exitError) throw exitError;
          },
          stop: async () => {
            stopping = true;
            await relay.stop();
          },
        };
      },
      drop: async () => void (await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)),
    };
  }

  debezium(pollIntervalMs?: number): Subject {
    const schema = name('dbzcmp_dbz');
    const { pool, url } = this;
    let made = false;
    const make = async (): Promise<void> => {
      if (made) return;
      made = true;
      // As Debezium's outbox documentation has it; a slot made before the rows, so the
      // backlog is in the WAL it streams.
      await pool.query(`CREATE SCHEMA "${schema}"`);
      await pool.query(`CREATE TABLE "${schema}".outboxevent (id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, payload jsonb)`);
      await pool.query(`CREATE PUBLICATION "${schema}" FOR TABLE "${schema}".outboxevent`);
      await pool.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [schema]);
    };
    const insert = (topic: string, t: boolean, key = `'key-' || (i % ${KEYS})`): string =>
      `INSERT INTO "${schema}".outboxevent (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), '${topic}', ${key}, 'order_updated', ${payloadSql(t)}`;
    return {
      system: 'debezium',
      fill: async (topic, rows) => {
        await make();
        for (let start = 0; start < rows; start += 50_000) {
          await pool.query(`${insert(topic, false)} FROM generate_series($1::int, $2::int) AS i`, [start, Math.min(rows, start + 50_000) - 1]);
        }
        await pool.query(`VACUUM ANALYZE "${schema}".outboxevent`);
      },
      script: (topic) => `\\set k random(1, ${KEYS})\n${insert(topic, true, `'key-' || :k`)};\n`,
      insertOne: async (topic) => void (await pool.query(`INSERT INTO "${schema}".outboxevent VALUES (gen_random_uuid(), $1, 'warm-up', 'warm-up', '{}')`, [topic])),
      count: async () => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outboxevent`)).rows[0]!.n),
      start: async () => {
        await make();
        const d = startDebezium({ databaseUrl: url, schema, publication: schema, slot: schema, brokers: brokers(), pollIntervalMs });
        return {
          pid: d.process.pid!,
          acked: () => d.acked,
          drainRate: () => (d.acked - d.ackedAtFirst) / ((d.lastAck - d.firstAck) / 1000),
          secondHalfRate: (rows) => {
            // Progress lines come every 200 ms: from the first that had half the rows acknowledged.
            const [from, ackedThen] = d.progress.find(([, acked]) => acked >= rows / 2) ?? [NaN, NaN];
            return (d.acked - ackedThen) / ((d.lastAck - from) / 1000);
          },
          backends: async () => (await pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'Debezium%'`)).rows.map((r) => r.pid),
          check: () => {
            if (d.exitError) throw d.exitError;
          },
          stop: () => d.stop(),
        };
      },
      drop: async () => {
        if (!made) return;
        // The walsender ends a moment after the runner: the slot is dropped once inactive.
        await until('the Debezium slot released', async () => (await pool.query(`SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active`, [schema])).rowCount === 0, 60_000, 100);
        await pool.query(`SELECT pg_drop_replication_slot($1)`, [schema]);
        await pool.query(`DROP PUBLICATION IF EXISTS "${schema}"`);
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      },
    };
  }

  /** Stops the meters an arm that failed left sampling (their timers would keep the process up). */
  private async stopMeters(): Promise<void> {
    await Promise.all([...this.running].map((m) => m.stop().catch(() => undefined)));
    this.running.clear();
  }

  /** CPU meters over one window: the process, its backends, all of Postgres but the bench, the broker. */
  meters(r: Running): { start(): Promise<void>; stop(): Promise<[number, number, number, number]> } {
    const broker = brokerPid();
    const ms = [new CpuMeter(() => [r.pid]), new CpuMeter(() => r.backends()), new CpuMeter(() => this.postgresPids()), new CpuMeter(() => (broker ? [broker] : []))];
    for (const m of ms) this.running.add(m);
    return {
      start: async () => void (await Promise.all(ms.map((m) => m.start()))),
      stop: async () => {
        for (const m of ms) this.running.delete(m);
        const [p, b, a, k] = await Promise.all(ms.map((m) => m.stop()));
        return [p!, b!, a!, broker ? k! : NaN];
      },
    };
  }

  async drain(s: Subject, rows: number): Promise<DrainFigures> {
    const label = `${S}, drain, ${s.system}`;
    const topic = await this.topic(false);
    try {
      log(`${label}: filling a ${fmt(rows)}-row backlog`);
      await s.fill(topic, rows);
      await this.pool.query('CHECKPOINT'); // the fill's writes are not the arm's
      const r = await s.start();
      try {
        const m = this.meters(r);
        // From the first acknowledged batch on: start-up (and the JVM's) is not per row.
        await acknowledged(`${label}: first ack`, r, 1);
        await m.start();
        await acknowledged(`${label}: drained`, r, rows);
        const [processCpu, backendsCpu, postgresCpu, brokerCpu] = await m.stop();
        const peakRssMiB = peakRss(r.pid) / 2 ** 20;
        const rowsPerSecond = r.drainRate();
        const secondHalfRowsPerSecond = r.secondHalfRate(rows);
        const delivered = await this.delivered(topic);
        if (delivered < rows) throw new Error(`${label}: only ${delivered} of ${rows} backlog rows are in the topic`);
        const per = 100_000 / rows;
        return {
          rowsPerSecond,
          secondHalfRowsPerSecond,
          processCpu: processCpu * per,
          backendsCpu: backendsCpu * per,
          postgresCpu: postgresCpu * per,
          brokerCpu: brokerCpu * per,
          totalCpu: (processCpu + postgresCpu + brokerCpu) * per,
          peakRssMiB,
          delivered,
        };
      } finally {
        await this.stopMeters();
        await r.stop();
      }
    } finally {
      await s.drop();
    }
  }

  async steady(s: Subject, seconds: number, pollIntervalMs?: number): Promise<SteadyFigures> {
    const label = `${S}, steady, ${s.system}${pollIntervalMs === undefined ? '' : ` (poll ${pollIntervalMs} ms)`}`;
    const topic = await this.topic(true);
    let r: Running | undefined;
    try {
      await s.fill(topic, 0);
      r = await s.start();
      await s.insertOne(topic);
      await acknowledged(`${label}: the warm-up row through`, r, 1);
      // Both JITs (V8's, the JVM's) warmed under the same load first, not measured.
      const load = (secs: number): Promise<string> => pgbench(s.script(topic), ['-c', '8', '-j', '2', '-R', String(STEADY_RATE), '-T', String(secs)], this.url);
      await load(WARM_UP_SECONDS);
      const before = await s.count();
      await acknowledged(`${label}: the warm-up load through`, r, before);
      const m = this.meters(r);
      log(`${label}: ${fmt(STEADY_RATE)} rows/s for ${seconds} s`);
      await m.start();
      const measuredFrom = Date.now();
      const achieved = tps(await load(seconds));
      const total = await s.count();
      const rows = total - before;
      if (rows <= 0) throw new Error(`${label}: pgbench wrote no rows`);
      await acknowledged(`${label}: every row acknowledged`, r, total);
      const [processCpu, backendsCpu, postgresCpu, brokerCpu] = await m.stop();
      const latencies = await this.appendLatencies(topic, total, measuredFrom);
      if (latencies.length < rows) throw new Error(`${label}: ${latencies.length} of ${rows} rows read back from the topic`);
      const per = 100_000 / rows;
      return {
        pollIntervalMs,
        offered: STEADY_RATE,
        achieved,
        rows,
        latency: percentiles(latencies),
        processCpu: processCpu * per,
        backendsCpu: backendsCpu * per,
        postgresCpu: postgresCpu * per,
        brokerCpu: brokerCpu * per,
        totalCpu: (processCpu + postgresCpu + brokerCpu) * per,
      };
    } finally {
      await this.stopMeters();
      await r?.stop();
      await s.drop();
    }
  }

  async idle(s: Subject, seconds: number): Promise<IdleFigures> {
    const topic = await this.topic(false);
    let r: Running | undefined;
    try {
      await s.fill(topic, 0);
      r = await s.start();
      await s.insertOne(topic);
      await acknowledged(`${S}, idle, ${s.system}: the warm-up row through`, r, 1);
      await sleep(3_000); // the relay's probe backed off, the JVM's start-up work done
      const m = this.meters(r);
      await m.start();
      await sleep(seconds * 1_000);
      const [processCpu, backendsCpu, postgresCpu] = await m.stop();
      const pct = (cpu: number): number => (100 * cpu) / seconds;
      return { seconds, processPct: pct(processCpu), backendsPct: pct(backendsCpu), postgresPct: pct(postgresCpu) };
    } finally {
      await this.stopMeters();
      await r?.stop();
      await s.drop();
    }
  }

  /** Broker append time (LogAppendTime) − `t` of every record with a `t` from `fromMs` on, sorted. */
  async appendLatencies(topic: string, expected: number, fromMs: number): Promise<number[]> {
    const consumer = new Kafka({ clientId: 'bench-dbz-read', brokers: brokers(), logLevel: logLevel.NOTHING }).consumer({ groupId: name('bench-dbz-read') });
    const out: number[] = [];
    let seen = 0;
    await consumer.connect();
    try {
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) {
            seen++;
            const t = (JSON.parse(m.value!.toString()) as { t?: number }).t;
            if (typeof t === 'number' && t >= fromMs) out.push(Math.max(0, Number(m.timestamp) - t));
          }
        },
      });
      await until(`${S}: ${expected} records read back from ${topic}`, () => seen >= expected, 120_000, 50);
    } finally {
      await consumer.disconnect();
    }
    return out.sort((a, b) => a - b);
  }
}

/**
 * Until `r` has acknowledged `count` records; throws when it dies, or when its count has
 * not moved for 120 s (a stalled arm fails the section instead of waiting out a timeout).
 */
async function acknowledged(what: string, r: Running, count: number): Promise<void> {
  let last = r.acked();
  let movedAt = Date.now();
  await until(
    what,
    () => {
      r.check();
      const n = r.acked();
      if (n >= count) return true;
      if (n !== last) [last, movedAt] = [n, Date.now()];
      else if (Date.now() - movedAt > 120_000) throw new Error(`${what}: stalled at ${n} of ${count} records acknowledged for 120 s`);
      return false;
    },
    3_600_000,
    20,
  );
}

/** Peak resident set (VmHWM) of a live process, bytes. */
function peakRss(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

export async function debezium(_pool: pg.Pool, o: { quick: boolean }): Promise<SectionResult<DebeziumData>> {
  const P = PROFILES[o.quick ? 'quick' : 'full'];
  const rounds = o.quick ? 1 : 3;
  const rows = P.drainRows;
  const steadySeconds = o.quick ? 10 : 30;
  const idleSeconds = 10;
  const db = await startLocalPostgres({ settings: { wal_level: 'logical', max_wal_senders: 10, max_replication_slots: 10 } });
  const bench = new Bench(db.url);
  try {
    await bench.connect();
    const all: DebeziumData['rounds'] = [];
    for (let i = 0; i < rounds; i++) {
      log(`${S}: round ${i + 1} of ${rounds}`);
      const order: System[] = i % 2 === 0 ? ['ours', 'debezium'] : ['debezium', 'ours'];
      const subject = (sys: System): Subject => (sys === 'ours' ? bench.ours() : bench.debezium(TUNED_POLL_MS));
      const round: Partial<Record<System, { drain?: DrainFigures; steady?: SteadyFigures; idle?: IdleFigures }>> = { ours: {}, debezium: {} };
      for (const sys of order) round[sys]!.drain = await bench.drain(subject(sys), rows);
      for (const sys of order) round[sys]!.steady = await bench.steady(subject(sys), steadySeconds, sys === 'debezium' ? TUNED_POLL_MS : undefined);
      for (const sys of order) round[sys]!.idle = await bench.idle(subject(sys), idleSeconds);
      for (const sys of order) for (const arm of ['drain', 'steady', 'idle'] as const) if (!round[sys]![arm]) throw new Error(`${S}: round ${i + 1}: the ${arm} arm of ${sys} did not run`);
      all.push(round as DebeziumData['rounds'][number]);
    }
    const debeziumDefaults = await bench.steady(bench.debezium(), steadySeconds);
    const medians = { ours: medianOf(all.map((r) => r.ours)), debezium: medianOf(all.map((r) => r.debezium)) };
    const data: DebeziumData = {
      versions: { debezium: DEBEZIUM_VERSION, postgresPlugin: 'pgoutput', kafkaClients: kafkaClientsVersion() },
      rows,
      steadySeconds,
      idleSeconds,
      rounds: all,
      debeziumDefaults,
      medians,
    };
    return { data, rows: tableRows(data, rounds) };
  } finally {
    await bench.close().catch(() => undefined);
    await db.destroy();
  }
}

/** The kafka-clients jar the fetch put on the runner's class path (Debezium's choice, 4.x). */
function kafkaClientsVersion(): string {
  const jar = readdirSync(fileURLToPath(new URL('../../.cache/debezium/libs/', import.meta.url))).find((f) => /^kafka-clients-.*\.jar$/.test(f));
  return jar?.replace(/^kafka-clients-|\.jar$/g, '') ?? 'unknown';
}
