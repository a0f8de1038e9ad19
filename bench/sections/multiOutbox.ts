/**
 * 11. Many outboxes: N = 4 outboxes drained by ONE `outbox-relay run` process (a list of
 * outboxes, OUTBOX_OUTBOXES: a relay per outbox in the process, sharing the Kafka client)
 * against N processes of `outbox-relay run`, one per outbox (DATABASE_URL, OUTBOX_SCHEMA),
 * side by side in one run, the arms alternating (which goes first swaps every round).
 *
 * Each arm gets four fresh schemas of the bench database (migrated), a topic each with 6
 * partitions (created up front), and the same backlog in each: `rows` ~200-byte JSON rows
 * over 10,000 keys, committed and vacuumed before the relay processes start. Both arms run
 * the command as deployed: defaults, metrics server on (an ephemeral port), log level info.
 *
 * Measured per arm, while the bench polls every outbox table every 50 ms
 * (`NOT EXISTS (… WHERE sent_at IS NULL)`, on the partial index of unsent rows) and
 * pg_stat_activity:
 * - rows/s over all four outboxes, from the first claim (the earliest `sent_at`: it is the
 *   claim transaction's now()) to the first poll that found all four backlogs at 0;
 * - when each outbox's backlog reached 0, from that same start (unfair sharing shows here);
 * - CPU-seconds per 100,000 rows of the relay process(es) (summed over the four for the
 *   N-process arm), each process from its own first claim to the end, /proc/<pid>/stat
 *   sampled with the polls; start-up apart (spawn → every outbox claiming; CPU of each
 *   process up to its first claim);
 * - CPU-seconds per 100,000 rows of their Postgres backends (application_name
 *   `<clientId>` or `<clientId>:…`), over the same window as rows/s;
 * - peak RSS (VmHWM, summed over the processes) and the most Postgres connections the arm
 *   held at once (pg_stat_activity by application_name).
 *
 * It checks itself, and throws: every row of every outbox sent (the table) and in its topic
 * (offsets), every process still running until stopped, and each arm the shape it claims:
 * each outbox's 256 shard leases held by one relay instance, four distinct instances, and
 * the process holding each instance's Postgres connections (client port → pid, `ss`) the
 * single process in one arm, four different processes (one per outbox) in the other.
 */
import type pg from 'pg';
import { KEYS, PARTITIONS, benchSchema, createTopic, fillBacklog, kafka } from '../common.js';
import { TICKS_PER_SECOND } from '../procCpu.js';
import { peakRss, postgresClientPids, startRun, TickSeries, type OutboxPlace, type RunProcess } from '../multiOutboxRelays.js';
import { row, type Plot, type Row, type SectionResult } from '../report.js';
import { fmt, log, median, sleep, wall } from '../util.js';
import { leasesSql } from '../../src/commands/sql/status.js';

const S = '11. many outboxes';
const OUTBOXES = 4;
const POLL_MS = 50;
const DRAIN_TIMEOUT_MS = 1_800_000;
/** Bins of the per-outbox throughput plots. */
const BIN_MS = 250;

type ArmName = 'one' | 'n';
const ARM_LABEL: Record<ArmName, string> = { one: `one process (${OUTBOXES} outboxes)`, n: `${OUTBOXES} processes (one outbox each)` };

export interface ArmFigures {
  arm: ArmName;
  processes: number;
  rows: number;
  /** All outboxes, first claim → all backlogs 0. */
  rowsPerSecond: number;
  seconds: number;
  /** Per outbox (o1…o4), seconds from the arm's first claim. */
  firstClaimSeconds: number[];
  drainedSeconds: number[];
  /** Slowest outbox's drain time over the fastest's. */
  drainSpread: number;
  /** CPU-seconds per 100,000 rows, each process from its own first claim. */
  relayCpu: number;
  /** CPU-seconds per 100,000 rows of the relays' Postgres backends. */
  postgresCpu: number;
  /** Start-up: seconds from the first spawn to the last outbox's first claim; CPU-seconds of each process up to its own first claim, summed. */
  startSeconds: number;
  startCpu: number;
  /** Sum of the processes' VmHWM. */
  peakRssMiB: number;
  /** Most relay connections in pg_stat_activity at once during the drain. */
  connections: number;
  /** Distinct relay instances holding the leases, and distinct processes holding their connections. */
  relayInstances: number;
  connectionPids: number;
  exitCodes: Array<number | null>;
}

export interface MultiOutboxData {
  outboxes: number;
  rowsPerOutbox: number;
  rounds: Array<{ order: ArmName[]; one: ArmFigures; n: ArmFigures }>;
  medians: { one: ArmFigures; n: ArmFigures };
  /** one process / N processes. */
  ratios: { rowsPerSecond: number; relayCpu: number; postgresCpu: number; peakRss: number; connections: number };
}

/** Rows of a relay's backends: application_name `<clientId>` or `<clientId>:…`. */
const BACKENDS = `(application_name = $1 OR left(application_name, length($1) + 1) = $1 || ':')`;

interface Layout {
  places: OutboxPlace[];
  topics: string[];
  drop(): Promise<void>;
}

async function layout(pool: pg.Pool, rows: number, arm: ArmName): Promise<Layout> {
  const places: OutboxPlace[] = [];
  const drops: Array<() => Promise<void>> = [];
  const topics: string[] = [];
  const drop = async (): Promise<void> => {
    for (const d of drops) await d().catch((e: unknown) => log(`${S}: could not drop a schema: ${String(e)}`));
  };
  try {
    for (let i = 1; i <= OUTBOXES; i++) {
      const { schema, drop: d } = await benchSchema(pool, `benchmo${arm}`);
      drops.push(d);
      topics.push(await createTopic(PARTITIONS));
      places.push({ name: `o${i}`, schema });
    }
    log(`${S}, ${ARM_LABEL[arm]}: filling ${OUTBOXES} × ${fmt(rows)}-row backlogs`);
    for (const [i, p] of places.entries()) await fillBacklog(pool, p.schema, topics[i]!, rows, KEYS);
    return { places, topics, drop };
  } catch (error) {
    await drop();
    throw error;
  }
}

/**
 * Which relay instance holds each outbox's leases, and which process holds that
 * instance's Postgres connections. Read after the drain, before the processes stop.
 */
async function identify(pool: pg.Pool, places: OutboxPlace[]): Promise<Array<{ owner: string; pids: number[] }>> {
  const byPort = postgresClientPids();
  const out: Array<{ owner: string; pids: number[] }> = [];
  for (const p of places) {
    const q = `"${p.schema}"`;
    const { rows: leases } = await pool.query<{ owned: string; owners: string; owner: string | null; app: string | null }>(
      `SELECT count(*) FILTER (WHERE l.valid) AS owned, count(DISTINCT l.owner) AS owners, min(l.owner) AS owner,
              (SELECT r.application_name FROM ${q}.outbox_relays r WHERE r.relay_id = min(l.owner)) AS app
         FROM (${leasesSql(q)}) AS l WHERE l.owner IS NOT NULL`,
    );
    const l = leases[0]!;
    if (Number(l.owned) !== 256 || Number(l.owners) !== 1 || !l.owner || !l.app) {
      throw new Error(`${S}: outbox ${p.name} (${p.schema}): ${l.owned} of 256 shards leased, by ${l.owners} relay instances (expected all, by one)`);
    }
    const { rows: backends } = await pool.query<{ client_port: number | null }>(`SELECT client_port FROM pg_stat_activity WHERE ${BACKENDS}`, [l.app]);
    const pids = [...new Set(backends.map((b) => byPort.get(Number(b.client_port))).filter((x): x is number => x !== undefined))];
    if (backends.length === 0 || pids.length === 0) {
      throw new Error(`${S}: outbox ${p.name}: no process found behind the ${backends.length} Postgres connections of its relay ${l.app} (ss -tnp)`);
    }
    out.push({ owner: l.owner, pids });
  }
  return out;
}

async function drainArm(pool: pg.Pool, rows: number, arm: ArmName, round: number): Promise<{ figures: ArmFigures; plot: Plot }> {
  const lay = await layout(pool, rows, arm);
  const clientId = `bench-mo-${arm}-r${round}`;
  const procs: RunProcess[] = [];
  try {
    const { places } = lay;
    const groups = arm === 'one' ? [places] : places.map((p) => [p]);
    log(`${S}, ${ARM_LABEL[arm]}: starting ${groups.length} × outbox-relay run`);
    for (const g of groups) procs.push(startRun(g, clientId));
    const relayTicks = new TickSeries();
    const backendTicks = new TickSeries();
    const relayPids = procs.map((p) => p.pid);
    relayTicks.record(relayPids);
    const drainedAt: Array<number | undefined> = places.map(() => undefined);
    let connections = 0;
    const deadline = Date.now() + DRAIN_TIMEOUT_MS;
    for (;;) {
      const dead = procs.find((p) => p.exited());
      if (dead) throw new Error(`${S}: relay process ${dead.pid} (${dead.outboxes.map((o) => o.name).join(',')}) exited with ${dead.exitCode()} during the drain:\n${dead.tail()}`);
      const open = places.map((p, i) => ({ p, i })).filter(({ i }) => drainedAt[i] === undefined);
      const t = wall();
      const { rows: r } = await pool.query<{ drained: boolean[]; pids: number[] }>(
        `SELECT ARRAY[${open.map(({ p }) => `NOT EXISTS (SELECT 1 FROM "${p.schema}".outbox WHERE sent_at IS NULL)`).join(', ')}] AS drained,
                ARRAY(SELECT pid FROM pg_stat_activity WHERE ${BACKENDS}) AS pids`,
        [clientId],
      );
      relayTicks.record(relayPids);
      backendTicks.record(r[0]!.pids);
      connections = Math.max(connections, r[0]!.pids.length);
      r[0]!.drained.forEach((d, k) => {
        if (d) drainedAt[open[k]!.i] = t;
      });
      if (drainedAt.every((d) => d !== undefined)) break;
      if (Date.now() > deadline) throw new Error(`${S}: ${ARM_LABEL[arm]}: outboxes ${open.map(({ p }) => p.name).join(', ')} not drained after ${DRAIN_TIMEOUT_MS / 1000} s`);
      await sleep(POLL_MS);
    }
    const endAt = Math.max(...(drainedAt as number[]));
    // The shape of the arm, while every relay still holds its leases and connections.
    const ids = await identify(pool, places);
    const instances = new Set(ids.map((x) => x.owner)).size;
    const holders = new Set(ids.flatMap((x) => x.pids));
    if (instances !== OUTBOXES) throw new Error(`${S}: ${ARM_LABEL[arm]}: ${instances} distinct relay instances hold the ${OUTBOXES} outboxes' leases`);
    if (ids.some((x) => x.pids.length !== 1)) throw new Error(`${S}: ${ARM_LABEL[arm]}: an outbox's relay connections come from several processes: ${JSON.stringify(ids)}`);
    if (arm === 'one' && (holders.size !== 1 || !holders.has(procs[0]!.pid))) {
      throw new Error(`${S}: one-process arm: the ${OUTBOXES} outboxes' relays run in processes ${[...holders].join(', ')}, not all in ${procs[0]!.pid}`);
    }
    if (arm === 'n' && ids.some((x, i) => x.pids[0] !== procs[i]!.pid)) {
      throw new Error(`${S}: ${OUTBOXES}-process arm: outbox relays run in processes ${ids.map((x) => x.pids[0]).join(', ')}, expected ${procs.map((p) => p.pid).join(', ')}`);
    }
    const rss = procs.reduce((s, p) => s + peakRss(p.pid), 0);
    const exitCodes: Array<number | null> = [];
    for (const p of procs) exitCodes.push(await p.stop());
    if (exitCodes.some((c) => c !== 0)) log(`${S}: ${ARM_LABEL[arm]}: relay exit codes ${exitCodes.join(', ')} (0 expected after SIGTERM)`);

    // Drained completely: every row sent in the table, and in its topic.
    const firstClaim: number[] = [];
    const admin = kafka().admin();
    await admin.connect();
    try {
      for (const [i, p] of places.entries()) {
        const { rows: c } = await pool.query<{ total: string; unsent: string; first: number | null }>(
          `SELECT count(*) AS total, count(*) FILTER (WHERE sent_at IS NULL) AS unsent, extract(epoch FROM min(sent_at)) * 1000 AS first FROM "${p.schema}".outbox`,
        );
        const { total, unsent, first } = c[0]!;
        if (Number(total) !== rows || Number(unsent) !== 0 || first === null) throw new Error(`${S}: ${ARM_LABEL[arm]}: outbox ${p.name} has ${unsent} of ${total} rows unsent (backlog ${rows})`);
        const inTopic = (await admin.fetchTopicOffsets(lay.topics[i]!)).reduce((n, o) => n + Number(o.high) - Number(o.low), 0);
        if (inTopic < rows) throw new Error(`${S}: ${ARM_LABEL[arm]}: outbox ${p.name}: ${inTopic} messages in its topic, ${rows} rows sent`);
        firstClaim.push(Number(first));
      }
    } finally {
      await admin.disconnect();
    }
    const t0 = Math.min(...firstClaim);
    const total = rows * OUTBOXES;
    const per = 100_000 / total;
    // Each process from its own first claim: in the N-process arm one may still be starting while another drains.
    const procStart = procs.map((p) => Math.min(...p.outboxes.map((o) => firstClaim[places.indexOf(o)]!)));
    const relayCpu = procs.reduce((s, p, k) => s + relayTicks.secondsSince(procStart[k]!, [p.pid]), 0);
    const startCpu = procs.reduce((s, p, k) => s + relayTicks.at(p.pid, procStart[k]!) / TICKS_PER_SECOND, 0);
    const postgresCpu = backendTicks.secondsSince(t0);
    const seconds = (endAt - t0) / 1000;
    const drainedSeconds = (drainedAt as number[]).map((d) => (d - t0) / 1000);
    const figures: ArmFigures = {
      arm,
      processes: procs.length,
      rows: total,
      rowsPerSecond: total / seconds,
      seconds,
      firstClaimSeconds: firstClaim.map((f) => (f - t0) / 1000),
      drainedSeconds,
      drainSpread: Math.max(...drainedSeconds) / Math.min(...drainedSeconds),
      relayCpu: relayCpu * per,
      postgresCpu: postgresCpu * per,
      startSeconds: (Math.max(...firstClaim) - Math.min(...procs.map((p) => p.spawnedAt))) / 1000,
      startCpu,
      peakRssMiB: rss / 2 ** 20,
      connections,
      relayInstances: instances,
      connectionPids: holders.size,
      exitCodes,
    };
    log(`${S}, ${ARM_LABEL[arm]}: ${fmt(figures.rowsPerSecond)} rows/s, outboxes drained at ${drainedSeconds.map((d) => fmt(d, 2)).join(' / ')} s`);
    return { figures, plot: await sharingPlot(pool, places, t0, arm, rows) };
  } finally {
    for (const p of procs) await p.stop();
    await lay.drop();
  }
}

/** Rows marked sent per outbox over time (by sent_at, the claim's start), in rows/s. */
async function sharingPlot(pool: pg.Pool, places: OutboxPlace[], t0: number, arm: ArmName, rows: number): Promise<Plot> {
  const series = [];
  for (const p of places) {
    const { rows: bins } = await pool.query<{ bin: number; n: string }>(
      `SELECT floor((extract(epoch FROM sent_at) * 1000 - $1) / $2)::int AS bin, count(*) AS n FROM "${p.schema}".outbox GROUP BY 1 ORDER BY 1`,
      [t0, BIN_MS],
    );
    series.push({ name: p.name, points: bins.map((b): [number, number] => [(b.bin * BIN_MS) / 1000, (Number(b.n) * 1000) / BIN_MS]) });
  }
  return {
    file: `multioutbox-${arm}.svg`,
    chart: { title: `${OUTBOXES} × ${fmt(rows)}-row backlogs, ${ARM_LABEL[arm]} (last round)`, xLabel: 'seconds since the first claim', yLabel: `rows/s per outbox (${BIN_MS} ms bins, by sent_at)`, series },
  };
}

/** The median across rounds of each figure (per outbox for the lists). */
function medianOf(xs: ArmFigures[]): ArmFigures {
  const m = (f: (a: ArmFigures) => number): number => median(xs.map(f));
  const perOutbox = (f: (a: ArmFigures) => number[]): number[] => xs[0]!.drainedSeconds.map((_, i) => median(xs.map((a) => f(a)[i]!)));
  const a = xs[0]!;
  return {
    ...a,
    rowsPerSecond: m((x) => x.rowsPerSecond),
    seconds: m((x) => x.seconds),
    firstClaimSeconds: perOutbox((x) => x.firstClaimSeconds),
    drainedSeconds: perOutbox((x) => x.drainedSeconds),
    drainSpread: m((x) => x.drainSpread),
    relayCpu: m((x) => x.relayCpu),
    postgresCpu: m((x) => x.postgresCpu),
    startSeconds: m((x) => x.startSeconds),
    startCpu: m((x) => x.startCpu),
    peakRssMiB: m((x) => x.peakRssMiB),
    connections: m((x) => x.connections),
    exitCodes: xs.flatMap((x) => x.exitCodes),
  };
}

/**
 * @param o.quick 20,000 rows per outbox and one round; else 100,000 and three rounds.
 */
export async function multiOutbox(pool: pg.Pool, o: { quick: boolean }): Promise<SectionResult<MultiOutboxData>> {
  const rowsPerOutbox = o.quick ? 20_000 : 100_000;
  const roundCount = o.quick ? 1 : 3;
  const rounds: MultiOutboxData['rounds'] = [];
  const plots = new Map<ArmName, Plot>();
  for (let r = 0; r < roundCount; r++) {
    const order: ArmName[] = r % 2 === 0 ? ['one', 'n'] : ['n', 'one'];
    const got: Partial<Record<ArmName, ArmFigures>> = {};
    for (const arm of order) {
      log(`${S}: round ${r + 1} of ${roundCount}, ${ARM_LABEL[arm]}`);
      const { figures, plot } = await drainArm(pool, rowsPerOutbox, arm, r);
      got[arm] = figures;
      plots.set(arm, plot);
    }
    if (!got.one || !got.n) throw new Error(`${S}: round ${r + 1}: an arm is missing`);
    rounds.push({ order, one: got.one, n: got.n });
  }
  if (rounds.length !== roundCount) throw new Error(`${S}: ${rounds.length} of ${roundCount} rounds ran`);
  const medians = { one: medianOf(rounds.map((x) => x.one)), n: medianOf(rounds.map((x) => x.n)) };
  const { one, n } = medians;
  const ratios = {
    rowsPerSecond: one.rowsPerSecond / n.rowsPerSecond,
    relayCpu: one.relayCpu / n.relayCpu,
    postgresCpu: one.postgresCpu / n.postgresCpu,
    peakRss: one.peakRssMiB / n.peakRssMiB,
    connections: one.connections / n.connections,
  };
  const of = roundCount > 1 ? `, median of ${roundCount} rounds` : '';
  const out: Row[] = [];
  for (const a of [one, n]) {
    out.push(
      row(
        S,
        `drain ${OUTBOXES} × ${fmt(rowsPerOutbox)} rows, ${ARM_LABEL[a.arm]}${of}`,
        `${fmt(a.rowsPerSecond)} rows/s (${fmt(a.seconds, 2)} s); CPU-s per 100k rows: relay ${fmt(a.relayCpu, 2)}, Postgres ${fmt(a.postgresCpu, 2)}; peak RSS ${fmt(a.peakRssMiB)} MiB; ${fmt(a.connections)} Postgres connections`,
      ),
    );
    out.push(
      row(
        S,
        `${ARM_LABEL[a.arm]}: each outbox drained at (s since the first claim)`,
        `${a.drainedSeconds.map((d) => fmt(d, 2)).join(' / ')}; slowest/fastest ${fmt(a.drainSpread, 2)}; first claims at ${a.firstClaimSeconds.map((d) => fmt(d, 2)).join(' / ')}`,
      ),
    );
    out.push(row(S, `${ARM_LABEL[a.arm]}: start-up, spawn → every outbox claiming`, `${fmt(a.startSeconds, 2)} s; ${fmt(a.startCpu, 2)} CPU-s of the process(es) to their first claim`));
  }
  out.push(row(S, 'one process / 4 processes: rows/s', fmt(ratios.rowsPerSecond, 2)));
  out.push(row(S, 'one process / 4 processes: relay CPU-s per row', fmt(ratios.relayCpu, 2)));
  out.push(row(S, 'one process / 4 processes: Postgres CPU-s per row', fmt(ratios.postgresCpu, 2)));
  out.push(row(S, 'one process / 4 processes: peak RSS, Postgres connections', `${fmt(ratios.peakRss, 2)}, ${fmt(ratios.connections, 2)}`));
  return { rows: out, data: { outboxes: OUTBOXES, rowsPerOutbox, rounds, medians, ratios }, plots: [...plots.values()] };
}
