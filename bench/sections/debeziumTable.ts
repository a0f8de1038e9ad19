// Section 10's figures and the table made of them (./debezium.ts measures them).
import { row, type Row } from '../report.js';
import { fmt, type Percentiles } from '../util.js';

export const S = '10. vs Debezium';
export const STEADY_RATE = 1_000;
/** Debezium's poll.interval.ms in the tuned arm (its default is 500). */
export const TUNED_POLL_MS = 10;

export type System = 'ours' | 'debezium';

export interface DrainFigures {
  rowsPerSecond: number;
  /** Rows/s over the second half of the backlog (from the acknowledgement of its middle row on): warm, past start-up. */
  secondHalfRowsPerSecond: number;
  /** CPU-seconds per 100,000 rows. */
  processCpu: number;
  backendsCpu: number;
  postgresCpu: number;
  brokerCpu: number;
  totalCpu: number;
  peakRssMiB: number;
  /** Records in the topic afterwards (offsets). */
  delivered: number;
}

export interface SteadyFigures {
  pollIntervalMs?: number;
  offered: number;
  achieved: number;
  rows: number;
  /** Commit (clock_timestamp() at insert) → broker append (LogAppendTime), ms. */
  latency: Percentiles;
  processCpu: number;
  backendsCpu: number;
  postgresCpu: number;
  brokerCpu: number;
  totalCpu: number;
}

export interface IdleFigures {
  seconds: number;
  /** % of a core. */
  processPct: number;
  backendsPct: number;
  postgresPct: number;
}

export interface DebeziumData {
  versions: { debezium: string; postgresPlugin: 'pgoutput'; kafkaClients: string };
  rows: number;
  steadySeconds: number;
  idleSeconds: number;
  rounds: Array<Record<System, { drain: DrainFigures; steady: SteadyFigures; idle: IdleFigures }>>;
  debeziumDefaults: SteadyFigures;
  medians: Record<System, { drain: DrainFigures; steady: SteadyFigures; idle: IdleFigures }>;
}

export function tableRows(d: DebeziumData, rounds: number): Row[] {
  const { ours, debezium: dbz } = d.medians;
  const of = rounds > 1 ? `, median of ${rounds}` : '';
  const pair = (a: number, b: number, digits: number, unit = ''): string => `ours ${fmt(a, digits)}${unit}, Debezium ${fmt(b, digits)}${unit}; ours/Debezium ${fmt(a / b, 2)}`;
  const lat = (x: Percentiles): string => `p50 ${fmt(x.p50, 1)} / p99 ${fmt(x.p99, 1)} ms`;
  const cpu = (x: DrainFigures | SteadyFigures): string => `${fmt(x.processCpu, 2)} + ${fmt(x.postgresCpu, 2)} + ${fmt(x.brokerCpu, 2)} = ${fmt(x.totalCpu, 2)}`;
  const out: Row[] = [];
  const dr = `drain ${fmt(d.rows)} rows${of}`;
  // Issue 21's targets, as ratios of this run.
  const ratio = (a: number, b: number): number => a / b;
  out.push(row(S, `${dr}: rows/s`, pair(ours.drain.rowsPerSecond, dbz.drain.rowsPerSecond, 0), 'ours/Debezium ≥ 2', ratio(ours.drain.rowsPerSecond, dbz.drain.rowsPerSecond) >= 2));
  out.push(
    row(
      S,
      `${dr}: rows/s over the second half of the backlog (warm)`,
      pair(ours.drain.secondHalfRowsPerSecond, dbz.drain.secondHalfRowsPerSecond, 0),
      'ours/Debezium ≥ 1.5',
      ratio(ours.drain.secondHalfRowsPerSecond, dbz.drain.secondHalfRowsPerSecond) >= 1.5,
    ),
  );
  out.push(row(S, `${dr}: process CPU-s per 100k rows (relay vs JVM)`, pair(ours.drain.processCpu, dbz.drain.processCpu, 2)));
  out.push(
    row(S, `${dr}: Postgres CPU-s per 100k rows, its backends (walsender for Debezium)`, pair(ours.drain.backendsCpu, dbz.drain.backendsCpu, 2), 'ours/Debezium ≤ 1.5', ratio(ours.drain.backendsCpu, dbz.drain.backendsCpu) <= 1.5),
  );
  out.push(row(S, `${dr}: Postgres CPU-s per 100k rows, all but the bench's connections`, pair(ours.drain.postgresCpu, dbz.drain.postgresCpu, 2)));
  out.push(row(S, `${dr}: CPU-s per 100k rows, process + Postgres (all) + broker = total`, `ours ${cpu(ours.drain)}, Debezium ${cpu(dbz.drain)}; total ours/Debezium ${fmt(ours.drain.totalCpu / dbz.drain.totalCpu, 2)}`, 'ours/Debezium ≤ 1', ours.drain.totalCpu <= dbz.drain.totalCpu));
  out.push(row(S, `${dr}: peak RSS of the process (VmHWM)`, pair(ours.drain.peakRssMiB, dbz.drain.peakRssMiB, 0, ' MiB')));
  const st = `steady ${fmt(STEADY_RATE)} rows/s for ${d.steadySeconds} s${of}`;
  out.push(
    row(
      S,
      `${st}: commit → broker append (LogAppendTime), Debezium poll.interval.ms ${TUNED_POLL_MS}`,
      `ours ${lat(ours.steady.latency)}, Debezium ${lat(dbz.steady.latency)}; p99 ours/Debezium ${fmt(ours.steady.latency.p99 / dbz.steady.latency.p99, 2)}`,
      'ours p50 ≤ 8 ms, p99 ours/Debezium ≤ 0.6',
      ours.steady.latency.p50 <= 8 && ratio(ours.steady.latency.p99, dbz.steady.latency.p99) <= 0.6,
    ),
  );
  out.push(
    row(S, `${st}: Postgres CPU-s per 100k rows, its backends`, pair(ours.steady.backendsCpu, dbz.steady.backendsCpu, 2), 'ours/Debezium ≤ 1.5', ratio(ours.steady.backendsCpu, dbz.steady.backendsCpu) <= 1.5),
  );
  const own = (x: SteadyFigures): number => x.processCpu + x.backendsCpu + x.brokerCpu;
  out.push(
    row(
      S,
      `${st}: CPU-s per 100k rows, process + its backends + broker`,
      `ours ${fmt(ours.steady.processCpu, 2)} + ${fmt(ours.steady.backendsCpu, 2)} + ${fmt(ours.steady.brokerCpu, 2)} = ${fmt(own(ours.steady), 2)}, Debezium ${fmt(dbz.steady.processCpu, 2)} + ${fmt(dbz.steady.backendsCpu, 2)} + ${fmt(dbz.steady.brokerCpu, 2)} = ${fmt(own(dbz.steady), 2)}; ours/Debezium ${fmt(ratio(own(ours.steady), own(dbz.steady)), 2)}`,
      'ours/Debezium ≤ 0.8',
      ratio(own(ours.steady), own(dbz.steady)) <= 0.8,
    ),
  );
  out.push(row(S, `${st}: CPU-s per 100k rows, process + Postgres (all) + broker = total`, `ours ${cpu(ours.steady)}, Debezium ${cpu(dbz.steady)}; total ours/Debezium ${fmt(ours.steady.totalCpu / dbz.steady.totalCpu, 2)}`, 'ours/Debezium ≤ 1', ours.steady.totalCpu <= dbz.steady.totalCpu));
  const def = d.debeziumDefaults;
  out.push(row(S, `steady ${fmt(STEADY_RATE)} rows/s, Debezium at defaults (poll.interval.ms 500), once`, `${lat(def.latency)}; CPU-s per 100k rows ${cpu(def)}; p99 ours/Debezium ${fmt(ours.steady.latency.p99 / def.latency.p99, 2)}`));
  const idle = (x: IdleFigures): string => `${fmt(x.processPct, 2)} + ${fmt(x.backendsPct, 2)}`;
  out.push(
    row(
      S,
      `idle ${d.idleSeconds} s${of}: % of a core, process + its backends`,
      `ours ${idle(ours.idle)}, Debezium ${idle(dbz.idle)}; ours/Debezium ${fmt((ours.idle.processPct + ours.idle.backendsPct) / (dbz.idle.processPct + dbz.idle.backendsPct), 2)}`,
      'ours ≤ 1.0',
      ours.idle.processPct + ours.idle.backendsPct <= 1.0,
    ),
  );
  return out;
}
