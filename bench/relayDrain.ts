/**
 * The drain of a backlog by a relay process: the backlog is filled (and vacuumed) before the
 * relay starts; rows/s run from the first batch Kafka acknowledged to the last. Used by the
 * drain, scale and peer sections.
 */
import type pg from 'pg';
import { withRelay } from './children.js';
import type { ArmFacts } from './armFacts.js';
import { KEYS, PARTITIONS, benchSchema, createTopic, fillBacklog, name } from './common.js';
import { fmt, log, sleep, until } from './util.js';
import { CpuMeter, backendPids, cpuSeconds } from './procCpu.js';

export interface Drain {
  rowsPerSecond: number;
  peakRss: number;
  /** Rows/s in 0.5 s bins, seconds since the first acknowledgement. */
  series: Array<[number, number]>;
  /** RSS in MiB, seconds since the first acknowledgement. */
  rss: Array<[number, number]>;
  /** Of the time batches were in flight, the share spent waiting for Kafka. */
  sendShare: number;
  batches: number;
  /**
   * The relay process's CPU-seconds per 100,000 rows, from /proc, from its ready line to the
   * last acknowledgement: its start (loading its modules, connecting) is not in it.
   */
  processCpuPer100k: number;
  /**
   * Its Postgres backends' CPU-seconds per 100,000 rows over the same window (by the
   * relay's application_name, bench/procCpu.ts): with the process's, what the relay costs.
   */
  postgresCpuPer100k: number;
  /** Distinct outbox ids acknowledged (more acks than this: some row went out twice). */
  distinctAcked: number;
  /** Rows acknowledged per client and mode, as the relay child recorded them (bench/child.ts). */
  ackedVia: Record<string, number>;
  /** Of those, rows whose value went out in Confluent's wire format (encodings: bench/child.ts). */
  ackedFramed: number;
  /** Exactly-once: batches that failed, and rows a restarted unit marked sent from its progress (bench/child.ts). */
  batchErrors: number;
  markedFromProgress: number;
  /** What the relay reported it ran on (bench/armFacts.ts). */
  ran: ArmFacts;
}

/** Rows/s from the first batch acknowledged to the last, and the per-second series. */
function drainRate(acks: Array<[number, number]>, rowsExpected: number): { rowsPerSecond: number; series: Array<[number, number]> } {
  const times = acks.map((a) => a[1]).sort((a, b) => a - b);
  if (times.length < rowsExpected) throw new Error(`only ${times.length} of ${rowsExpected} rows acknowledged`);
  const first = times[0]!;
  const last = times[times.length - 1]!;
  // The first batch's own duration is not in [first, last]: count the rows after the
  // first acknowledgement over the time after it.
  const afterFirst = times.filter((t) => t > first).length;
  const seconds = (last - first) / 1000;
  const bins = new Map<number, number>();
  for (const t of times) {
    const bin = Math.floor((t - first) / 500);
    bins.set(bin, (bins.get(bin) ?? 0) + 1);
  }
  const series: Array<[number, number]> = [];
  for (let b = 0; b <= Math.floor((last - first) / 500); b++) series.push([b / 2, (bins.get(b) ?? 0) * 2]);
  return { rowsPerSecond: seconds > 0 ? afterFirst / seconds : NaN, series };
}

/** A relay child draining a `backlog`-row backlog over `keys` keys, in a schema and topic of its own. */
export async function relayDrain(pool: pg.Pool, backlog: number, label: string, relayOptions: Record<string, unknown> = {}, keys = KEYS): Promise<Drain> {
  const { schema, drop } = await benchSchema(pool, 'benchdrain');
  try {
    const topic = await createTopic(PARTITIONS);
    log(`${label}: filling a ${fmt(backlog)}-row backlog`);
    await fillBacklog(pool, schema, topic, backlog, keys);
    let processCpu = NaN;
    let postgresCpu = NaN;
    // The relay's connections are named after its client id: its backends, for their CPU.
    const clientId = typeof relayOptions.clientId === 'string' ? relayOptions.clientId : name('bench-drain');
    const relay = await withRelay(
      schema,
      async (r) => {
        const backends = new CpuMeter(() => backendPids(pool, clientId));
        const cpuAtReady = cpuSeconds(r.process.pid!);
        await backends.start();
        await drained(pool, schema, label, () => r.acks.length, backlog);
        const cpuDrained = cpuSeconds(r.process.pid!);
        postgresCpu = await backends.stop();
        if (cpuAtReady !== undefined && cpuDrained !== undefined) processCpu = cpuDrained - cpuAtReady;
        await sleep(300); // the last RSS sample
        return r;
      },
      { ...relayOptions, clientId },
    );
    if (!Number.isFinite(processCpu)) throw new Error(`${label}: no CPU reading of the relay process in /proc`);
    const rate = drainRate(relay.acks, backlog);
    const t0 = relay.acks.reduce((m, a) => Math.min(m, a[1]), Infinity);
    const timing = relay.timing ?? { sendMs: NaN, sends: 0, batchMs: NaN, batches: 0, ackedVia: {}, ackedFramed: 0, markedFromProgress: 0, batchErrors: 0 };
    return {
      rowsPerSecond: rate.rowsPerSecond,
      peakRss: relay.peakRss,
      series: rate.series,
      rss: relay.rss.map(([t, r]) => [(t - t0) / 1000, r / 2 ** 20]),
      sendShare: timing.sendMs / timing.batchMs,
      batches: timing.batches,
      processCpuPer100k: (processCpu / backlog) * 100_000,
      postgresCpuPer100k: (postgresCpu / backlog) * 100_000,
      distinctAcked: new Set(relay.acks.map((a) => a[0])).size,
      ackedVia: timing.ackedVia,
      ackedFramed: timing.ackedFramed ?? 0,
      batchErrors: timing.batchErrors,
      markedFromProgress: timing.markedFromProgress,
      ran: relay.ran!,
    };
  } finally {
    await drop();
  }
}

/**
 * Until `backlog` rows were acknowledged (30 min at most). Fails within a minute when
 * Postgres has no unsent row left and acknowledgements stay short: rows the relay marked
 * sent that the child's recording never saw would otherwise hold the run for the 30 min.
 */
async function drained(pool: pg.Pool, schema: string, label: string, acked: () => number, backlog: number): Promise<void> {
  let allSentSinceMs: number | undefined;
  let checkedAtMs = 0;
  await until(
    `${label} drained`,
    async () => {
      if (acked() >= backlog) return true;
      if (Date.now() - checkedAtMs < 5_000) return false;
      checkedAtMs = Date.now();
      const { rows } = await pool.query<{ unsent: string }>(`SELECT count(*) AS unsent FROM "${schema}".outbox WHERE sent_at IS NULL`);
      if (Number(rows[0]!.unsent) > 0) allSentSinceMs = undefined;
      else allSentSinceMs ??= Date.now();
      if (allSentSinceMs !== undefined && Date.now() - allSentSinceMs > 60_000) {
        throw new Error(`${label}: every row is marked sent, but the relay child recorded ${acked()} acknowledgements of ${backlog}`);
      }
      return false;
    },
    1_800_000,
    200,
  );
}
