/**
 * 16. Exactly-once: what `delivery: 'exactly-once'` costs against at-least-once on the same
 * client, four arms side by side in one run, their order rotating round by round:
 * exactly-once and at-least-once on the default client (platformatic) and on kafkajs
 * (exactly-once: 8 workers, one per unit of shards, each batch one Kafka transaction).
 *
 * - Drain: a committed, vacuumed backlog drained by a relay process (bench/relayDrain.ts,
 *   as the drain section): rows/s and the relay process's CPU-seconds per 100,000 rows,
 *   medians over the rounds.
 * - Latency: pgbench writers at a steady offered rate (bench/sections/latency.ts), the
 *   relay alone: commit → ack per row, the rounds' rows pooled; then one more run per arm
 *   with a bare read_committed reader beside the relay (bench/child.ts): commit → fetched.
 *
 * Targets (issue 35's), each exactly-once arm against at-least-once on its own client:
 * drain rows/s at least 0.85 x, relay process + its Postgres backends CPU per row at most
 * 1.2 x, commit → ack p50 at most the interval + 20 ms above, p99 at most 2 x.
 * A fifth arm runs the default client with 8 units (the default before 2): what the unit
 * count does, in the same run.
 *
 * The reference (bench/kafkaReference.ts): Kafka's own producer doing what the units do,
 * without Postgres, at the same offered rates: acks=all sends against a transaction per
 * unit's waiting rows, at 2 and at 8 units. What a transaction costs on this broker with
 * Kafka's own client, beside what it costs the relay.
 */
import type pg from 'pg';
import { name } from '../common.js';
import { relayDrain } from '../relayDrain.js';
import { distinctArms, referenceArm, type ArmFacts } from '../armFacts.js';
import { row, type Row, type SectionResult } from '../report.js';
import type { Series } from '../svg.js';
import { load1 } from '../machine.js';
import { fmt, median, percentileSeries, percentiles, type Percentiles } from '../util.js';
import { latencyAt } from './latency.js';
import { runReference, type ReferenceRun } from '../kafkaReference.js';

const SECTION = '16. exactly-once';

export interface ExactlyOnceOptions {
  /** Backlog rows per drain. */
  rows: number;
  /** Rounds of every arm, drains and relay-alone latency runs; the arms' order rotates each round. */
  rounds: number;
  /** Offered rows/s (each a set of relay-alone runs; the reader's runs at the last) and seconds of it per arm and round. */
  rates: number[];
  latencySeconds: number;
}

/** The exactly-once arms' --transaction-interval-ms (the default, named so the label says it). */
const INTERVAL_MS = 100;
/** The exactly-once arms' --exactly-once-units (the default, named so the label says it), and the comparison arm's. */
const UNITS = 2;
const MORE_UNITS = 8;
/** The reference's retry.backoff.ms: Kafka's default is 100; the relay's units retry after 2, doubling (src/relay/transactionRetry.ts). */
const REFERENCE_BACKOFF_MS = 2;

type ArmKey = 'exactlyOnce' | 'kafkajs' | 'exactlyOnceDefault' | 'exactlyOnceMoreUnits' | 'default';

interface Arm {
  key: ArmKey;
  label: string;
  /** How bench/child.ts must have recorded every acknowledgement of this arm (its ackedVia). */
  via: 'kafkajs transaction' | 'kafkajs' | 'platformatic transaction' | 'platformatic';
  /** Relay options for one run: exactly-once takes a fresh transactional-id prefix each time. */
  options(): Record<string, unknown>;
}

const ARMS: Arm[] = [
  {
    key: 'exactlyOnceDefault',
    label: `exactly-once (default, platformatic, ${UNITS} units, interval ${INTERVAL_MS} ms)`,
    via: 'platformatic transaction',
    options: () => ({ producer: 'platformatic', delivery: 'exactly-once', transactionalIdPrefix: name('bench-eos'), transactionIntervalMs: INTERVAL_MS, exactlyOnceUnits: UNITS }),
  },
  {
    key: 'exactlyOnceMoreUnits',
    label: `exactly-once (platformatic, ${MORE_UNITS} units, interval ${INTERVAL_MS} ms)`,
    via: 'platformatic transaction',
    options: () => ({ producer: 'platformatic', delivery: 'exactly-once', transactionalIdPrefix: name('bench-eos'), transactionIntervalMs: INTERVAL_MS, exactlyOnceUnits: MORE_UNITS }),
  },
  {
    key: 'exactlyOnce',
    label: `exactly-once (kafkajs, ${UNITS} units, interval ${INTERVAL_MS} ms)`,
    via: 'kafkajs transaction',
    // Fresh each run, as the mode asks one prefix per outbox database: no arm shares
    // even the progress topic of another.
    options: () => ({ producer: 'kafkajs', delivery: 'exactly-once', transactionalIdPrefix: name('bench-eos'), transactionIntervalMs: INTERVAL_MS, exactlyOnceUnits: UNITS }),
  },
  { key: 'kafkajs', label: 'at-least-once (kafkajs)', via: 'kafkajs', options: () => ({ producer: 'kafkajs' }) },
  // Named: bench/child.ts hands the relay a kafkajs client, which would otherwise publish.
  { key: 'default', label: 'at-least-once (default, platformatic)', via: 'platformatic', options: () => ({ producer: 'platformatic' }) },
];

/**
 * The arm ran as labelled: every row acknowledged through its client and mode and none
 * through another (a relay handed a kafkajs client and no producer publishes through it;
 * exactly-once rows count at their transaction's commit only).
 */
function checkVia(arm: Arm, ackedVia: Record<string, number>, what: string): void {
  const other = Object.entries(ackedVia).filter(([via, n]) => via !== arm.via && n > 0);
  if (!(ackedVia[arm.via]! > 0) || other.length > 0) throw new Error(`${what}: ${arm.label} acknowledged ${JSON.stringify(ackedVia)}, expected ${arm.via} only`);
}

/** Round r's order: the arms rotated by r, so that each comes first and last in turn. */
function order(r: number): Arm[] {
  return ARMS.map((_, i) => ARMS[(i + r) % ARMS.length]!);
}

export interface ArmDrain {
  rowsPerSecond: number;
  processCpuPer100k: number;
  /** The relay's Postgres backends (bench/relayDrain.ts), medians over the rounds as the others. */
  postgresCpuPer100k: number;
  rounds: Array<{ rowsPerSecond: number; processCpuPer100k: number; postgresCpuPer100k: number; sendShare: number; batches: number; peakRss: number; batchErrors: number; markedFromProgress: number }>;
}

export interface ArmLatency {
  /** Relay alone: commit → Kafka ack (exactly-once: the transaction's commit answered), the rounds' rows pooled. */
  rows: number;
  achieved: number[];
  ack: Percentiles;
  /** With the read_committed reader beside the relay, one round: commit → fetched by it. */
  readerRows: number;
  reader: Percentiles;
}

export interface ExactlyOnceData {
  rows: number;
  rounds: number;
  rates: number[];
  intervalMs: number;
  units: number;
  drain: Record<ArmKey, ArmDrain>;
  /** Per offered rate (its text), per arm; the reader's figures at the last rate only. */
  latency: Record<string, Record<ArmKey, ArmLatency>>;
  /** Per offered rate (its text): Kafka's own producer, arrival → acknowledged or committed, the rounds' rows pooled. */
  reference: Record<string, ReferenceLatency>;
}

export interface ReferenceLatency {
  client: string;
  retryBackoffMs: number;
  acks: Percentiles & { rows: number };
  transactions: Percentiles & { rows: number; transactions: number };
  transactionsMoreUnits: Percentiles & { rows: number; transactions: number };
}

const f = (x: Percentiles): string => `p50 ${fmt(x.p50, 1)} / p95 ${fmt(x.p95, 1)} / p99 ${fmt(x.p99, 1)} ms`;

/** Per arm, a list each, filled as the runs come in. */
const perArm = <T>(): Record<ArmKey, T[]> => ({ exactlyOnce: [], kafkajs: [], exactlyOnceDefault: [], exactlyOnceMoreUnits: [], default: [] });

/** Each exactly-once arm and the at-least-once arm of its client; the targets are the default units'. */
const PAIRS = [
  { eos: 'exactlyOnceDefault', base: 'default', targets: true },
  { eos: 'exactlyOnce', base: 'kafkajs', targets: true },
  { eos: 'exactlyOnceMoreUnits', base: 'default', targets: false },
] as const;
const DRAIN_TARGET = 0.85;
const CPU_TARGET = 1.2;
const P99_TARGET = 2;
/** Commit → ack p50 may exceed at-least-once's by at most the interval and this. */
const P50_SLACK_MS = 20;

export async function exactlyOnce(pool: pg.Pool, o: ExactlyOnceOptions): Promise<SectionResult<ExactlyOnceData>> {
  // The machine is shared and the rows are built at the end: each row carries the highest
  // 1-minute load average seen as its arm's runs ended, not the load at the end.
  const loads = { drain: perArm<number>(), ack: perArm<number>(), reader: perArm<number>() };
  const drains = perArm<ArmDrain['rounds'][number]>();
  // What each arm's relay (and the reader beside it) reported it ran on, per kind of row.
  const ran = { drain: perArm<ArmFacts>(), ack: perArm<ArmFacts>(), reader: perArm<ArmFacts>() };
  for (let r = 0; r < o.rounds; r++) {
    for (const arm of order(r)) {
      const what = `exactly-once section, drain round ${r + 1}, ${arm.label}`;
      const d = await relayDrain(pool, o.rows, what, arm.options());
      checkVia(arm, d.ackedVia, what);
      // A row acknowledged twice would end the drain's wait before the last row went out.
      if (d.distinctAcked !== o.rows) throw new Error(`${what}: ${d.distinctAcked} distinct rows acknowledged of ${o.rows}`);
      ran.drain[arm.key].push(d.ran);
      drains[arm.key].push({
        rowsPerSecond: d.rowsPerSecond,
        processCpuPer100k: d.processCpuPer100k,
        postgresCpuPer100k: d.postgresCpuPer100k,
        sendShare: d.sendShare,
        batches: d.batches,
        peakRss: d.peakRss,
        batchErrors: d.batchErrors,
        markedFromProgress: d.markedFromProgress,
      });
      loads.drain[arm.key].push(load1());
    }
  }
  const drain = Object.fromEntries(
    ARMS.map((a) => [
      a.key,
      {
        rowsPerSecond: median(drains[a.key].map((x) => x.rowsPerSecond)),
        processCpuPer100k: median(drains[a.key].map((x) => x.processCpuPer100k)),
        postgresCpuPer100k: median(drains[a.key].map((x) => x.postgresCpuPer100k)),
        rounds: drains[a.key],
      },
    ]),
  ) as Record<ArmKey, ArmDrain>;

  // The relay alone for the targets' figure, as section 3's target arm: a kafkajs reader
  // fetching beside it on these two cores made commit → ack several times slower in a
  // trial (so the reader gets runs of its own, one round, at the last rate: what a reader
  // sees, for context).
  const latency: Record<string, Record<ArmKey, ArmLatency>> = {};
  const reference: Record<string, ReferenceLatency> = {};
  const readerRate = o.rates[o.rates.length - 1]!;
  let lastAcks = perArm<number>();
  let lastReads = perArm<number>();
  for (const rate of o.rates) {
    const acks = perArm<number>();
    const reads = perArm<number>();
    const achieved = perArm<number>();
    for (let r = 0; r < o.rounds; r++) {
      // Rotated the other way from the drains, so that no arm always runs right after the same one.
      for (const arm of order(o.rounds - r).reverse()) {
        const l = await latencyAt(pool, rate, o.latencySeconds, false, arm.options());
        checkVia(arm, l.ackedVia(), `exactly-once section, latency at ${rate} rows/s, round ${r + 1}`);
        acks[arm.key].push(...l.ackSorted);
        ran.ack[arm.key].push(...l.ran.relay);
        achieved[arm.key].push(l.achieved);
        loads.ack[arm.key].push(load1());
      }
    }
    if (rate === readerRate) {
      for (const arm of order(o.rounds)) {
        const l = await latencyAt(pool, rate, o.latencySeconds, true, arm.options(), 'reader');
        checkVia(arm, l.ackedVia(), 'exactly-once section, latency with a read_committed reader');
        reads[arm.key].push(...l.handlerSorted);
        ran.reader[arm.key].push(...l.ran.relay, ...l.ran.beside);
        loads.reader[arm.key].push(load1());
      }
    }
    if (rate === readerRate) {
      lastAcks = acks;
      lastReads = reads;
    }
    reference[String(rate)] = await referenceAt(rate, o);
    latency[String(rate)] = Object.fromEntries(
      ARMS.map((a) => {
        const ack = acks[a.key].sort((x, y) => x - y);
        const read = reads[a.key].sort((x, y) => x - y);
        return [a.key, { rows: ack.length, achieved: achieved[a.key], ack: percentiles(ack), readerRows: read.length, reader: percentiles(read) }];
      }),
    ) as Record<ArmKey, ArmLatency>;
  }

  const rows: Row[] = [];
  // Kafka's own Java client, the reference's rows' arm.
  const javaArm = referenceArm(reference[String(o.rates[0])]!.client.replace(/^kafka-clients /, ''));
  const add = (arms: ArmKey[], kind: keyof typeof loads | 'reference', what: string, value: string, target?: string, met?: boolean, withReference = false): void => {
    if (kind === 'reference') {
      rows.push(row(SECTION, what, value, target, met, [javaArm]));
      return;
    }
    const r = row(SECTION, what, value, target, met, [...distinctArms(arms.flatMap((a) => ran[kind][a])), ...(withReference ? [javaArm] : [])]);
    r.load1 = Math.max(...arms.flatMap((a) => loads[kind][a]));
    rows.push(r);
  };
  // The comparison arm's rows carry no target: the targets are the default's.
  const target = (on: boolean, text: string, met: boolean): [string?, boolean?] => (on ? [text, met] : []);
  const labelOf = (k: ArmKey): string => ARMS.find((a) => a.key === k)!.label;
  const each = o.rounds > 1 ? `, median of ${o.rounds}` : '';
  for (const a of ARMS) {
    const d = drain[a.key];
    // A failed batch is retried; in exactly-once mode its rows may be marked from the unit's progress. Said, not hidden.
    const errors = d.rounds.reduce((n, x) => n + x.batchErrors, 0);
    const marked = d.rounds.reduce((n, x) => n + x.markedFromProgress, 0);
    const failures = errors > 0 ? `; ${fmt(errors)} failed batches in all rounds, ${fmt(marked)} rows marked sent from a unit's progress` : '';
    add([a.key], 'drain', `drain ${fmt(o.rows)} rows, ${a.label}${each}`, `${fmt(d.rowsPerSecond)} rows/s; CPU-s per 100k rows: relay process ${fmt(d.processCpuPer100k, 2)}, its Postgres backends ${fmt(d.postgresCpuPer100k, 2)}${failures}`);
  }
  for (const { eos, base, targets } of PAIRS) {
    const ratio = drain[eos].rowsPerSecond / drain[base].rowsPerSecond;
    const processCpu = drain[eos].processCpuPer100k / drain[base].processCpuPer100k;
    const both = (k: ArmKey): number => drain[k].processCpuPer100k + drain[k].postgresCpuPer100k;
    const cpu = both(eos) / both(base);
    add([eos, base], 'drain', `drain, ${labelOf(eos)} / ${labelOf(base)}: rows/s`, fmt(ratio, 2), ...target(targets, `≥ ${DRAIN_TARGET}`, ratio >= DRAIN_TARGET));
    add([eos, base], 'drain', `drain, ${labelOf(eos)} / ${labelOf(base)}: relay process + its Postgres backends CPU-s per row`, fmt(cpu, 2), ...target(targets, `≤ ${CPU_TARGET}`, cpu <= CPU_TARGET));
    add([eos, base], 'drain', `drain, ${labelOf(eos)} / ${labelOf(base)}: relay process CPU-s per row`, fmt(processCpu, 2));
  }

  // Exactly-once's ack is the transaction's commit answered (bench/child.ts records it
  // there), not the records' produce: a read_committed reader sees nothing of a
  // transaction before it commits, so this is the earliest a reader could see the row.
  // Not the moment it does: Kafka answers the commit once the coordinator has logged it,
  // and writes the commit markers that let read_committed fetches past the records
  // after that. The reader rows measure what a reader sees, its fetch's wait included.
  const rounds = o.rounds > 1 ? `${o.rounds} rounds pooled, ` : '';
  for (const rate of o.rates) {
    const at = latency[String(rate)]!;
    for (const a of ARMS) {
      const l = at[a.key];
      const achievedAll = l.achieved.map((x) => fmt(x)).join(', ');
      add([a.key], 'ack', `${fmt(rate)} rows/s offered (${achievedAll} achieved; ${rounds}${fmt(l.rows)} rows), relay alone, ${a.label}: commit → Kafka ack${a.via.endsWith('transaction') ? ' (transaction committed)' : ''}`, f(l.ack));
    }
    for (const { eos, base, targets } of PAIRS) {
      const over = at[eos].ack.p50 - at[base].ack.p50;
      add([eos, base], 'ack', `${fmt(rate)} rows/s: commit → ack p50, ${labelOf(eos)} − ${labelOf(base)}`, `${fmt(over, 1)} ms`, ...target(targets, `≤ ${INTERVAL_MS + P50_SLACK_MS} ms (interval + ${P50_SLACK_MS})`, over <= INTERVAL_MS + P50_SLACK_MS));
      const ratio = at[eos].ack.p99 / at[base].ack.p99;
      add([eos, base], 'ack', `${fmt(rate)} rows/s: commit → ack p99, ${labelOf(eos)} / ${labelOf(base)}`, fmt(ratio, 2), ...target(targets, `≤ ${P99_TARGET}`, ratio <= P99_TARGET));
    }
    // Kafka's own producer at the same rate: what a transaction costs on this broker without Postgres.
    const ref = reference[String(rate)]!;
    const kc = ref.client;
    const refWhat = `${fmt(rate)} rows/s offered, Kafka's own producer (${kc}), no Postgres`;
    add([], 'reference', `${refWhat}, ${UNITS} units, acks=all: arrival → acknowledged (${fmt(ref.acks.rows)} rows)`, f(ref.acks));
    add([], 'reference', `${refWhat}, ${UNITS} units, a transaction per unit's waiting rows, retry.backoff.ms ${ref.retryBackoffMs}: arrival → commit returned (${fmt(ref.transactions.rows)} rows, ${fmt(ref.transactions.transactions)} transactions)`, f(ref.transactions));
    add([], 'reference', `${refWhat}, ${MORE_UNITS} units, the same: arrival → commit returned (${fmt(ref.transactionsMoreUnits.rows)} rows, ${fmt(ref.transactionsMoreUnits.transactions)} transactions)`, f(ref.transactionsMoreUnits));
    const relayAdded = at.exactlyOnceDefault.ack.p99 - at.default.ack.p99;
    const refAdded = ref.transactions.p99 - ref.acks.p99;
    add(['exactlyOnceDefault', 'default'], 'ack', `${fmt(rate)} rows/s: p99 that transactions add over acknowledged sends at ${UNITS} units, the relay (${labelOf('exactlyOnceDefault')} − ${labelOf('default')}) / Kafka's own producer without Postgres (${kc})`, `${fmt(relayAdded, 1)} / ${fmt(refAdded, 1)} ms`, undefined, undefined, true);
  }
  const atReader = latency[String(readerRate)]!;
  for (const a of ARMS) {
    add([a.key], 'reader', `${fmt(readerRate)} rows/s offered (${fmt(atReader[a.key].readerRows)} rows), a read_committed kafkajs reader beside the relay, ${a.label}: commit → fetched by the reader`, f(atReader[a.key].reader));
  }
  for (const { eos, base } of PAIRS) {
    add([eos, base], 'reader', `commit → fetched by the read_committed kafkajs reader p99, ${labelOf(eos)} / ${labelOf(base)}`, fmt(atReader[eos].reader.p99 / atReader[base].reader.p99, 2));
  }

  const series: Series[] = ARMS.flatMap((a) => [
    { name: `${a.label}: commit → ack`, points: percentileSeries(lastAcks[a.key]) },
    { name: `${a.label}: commit → reader`, points: percentileSeries(lastReads[a.key]) },
  ]);
  return {
    data: { rows: o.rows, rounds: o.rounds, rates: o.rates, intervalMs: INTERVAL_MS, units: UNITS, drain, latency, reference },
    rows,
    plots: [{ file: 'exactly-once-latency.svg', chart: { title: `Exactly-once against at-least-once at ${fmt(readerRate)} rows/s offered`, xLabel: 'percentile', yLabel: 'ms', series } }],
  };
}

/** Kafka's own producer at `rate`, each mode once per round, the rounds' rows pooled (bench/kafkaReference.ts checks each run). */
async function referenceAt(rate: number, o: ExactlyOnceOptions): Promise<ReferenceLatency> {
  const runs: Record<'acks' | 'transactions' | 'transactionsMoreUnits', ReferenceRun[]> = { acks: [], transactions: [], transactionsMoreUnits: [] };
  for (let r = 0; r < o.rounds; r++) {
    const run = (mode: ReferenceRun['mode'], units: number): Promise<ReferenceRun> => runReference({ rate, seconds: o.latencySeconds, mode, units, retryBackoffMs: REFERENCE_BACKOFF_MS });
    runs.acks.push(await run('acks', UNITS));
    runs.transactions.push(await run('transactions', UNITS));
    runs.transactionsMoreUnits.push(await run('transactions', MORE_UNITS));
  }
  const pooled = (list: ReferenceRun[]) => ({
    ...percentiles(list.flatMap((x) => x.latencies).sort((a, b) => a - b)),
    rows: list.reduce((n, x) => n + x.rows, 0),
    transactions: list.reduce((n, x) => n + x.transactions, 0),
  });
  const { transactions: _, ...acks } = pooled(runs.acks);
  return { client: runs.acks[0]!.client, retryBackoffMs: REFERENCE_BACKOFF_MS, acks, transactions: pooled(runs.transactions), transactionsMoreUnits: pooled(runs.transactionsMoreUnits) };
}
