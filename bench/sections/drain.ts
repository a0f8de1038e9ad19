/**
 * 2. Drain: a backlog filled before the relay starts (INSERT … SELECT generate_series in
 * chunks, vacuumed), drained by a relay process at its defaults; rows/s from the first
 * acknowledged batch to the last, against the raw ceiling of its producer adapter
 * (platformatic, the default since issue 21: ceilings section); the share of batch time
 * spent waiting for Kafka; then other relay settings on the same size of backlog, for
 * comparison; then the kafkajs producer adapter (`producer: 'kafkajs'`), otherwise at the
 * defaults, against ceiling 1 (raw kafkajs).
 */
import type pg from 'pg';
import { KEYS } from '../common.js';
import { relayDrain } from '../relayDrain.js';
import { armHere } from '../armFacts.js';
import { platformaticCeiling } from './ceilings.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt } from '../util.js';

export interface DrainOptions {
  rows: number;
  keys?: number;
  /** Ceiling 1 (the raw producer's rows/s, from the ceilings section). */
  ceiling: number;
  /** Relay settings drained after the defaults, for comparison. */
  compare: Array<{ batchSize?: number; batchesInFlight?: number }>;
}

export interface DrainData {
  rows: number;
  /** The relay at its defaults (producer adapter platformatic since issue 21). */
  rowsPerSecond: number;
  sendShare: number;
  batches: number;
  peakRss: number;
  /** The raw @platformatic/kafka producer's rows/s (ceilings section): the default adapter's ceiling. */
  ceiling: number;
  compared: Array<{ relayOptions: DrainOptions['compare'][number]; rowsPerSecond: number; sendShare: number }>;
  /** The relay at its defaults but with the kafkajs producer adapter, against ceiling 1 (raw kafkajs). */
  kafkajs: { rowsPerSecond: number; sendShare: number; batches: number; peakRss: number; ceiling: number; processCpuPer100k: number };
  /** The default relay's process CPU-seconds per 100,000 rows. */
  processCpuPer100k: number;
}

function describe(o: DrainOptions['compare'][number]): string {
  return [o.batchSize !== undefined && `batch ${o.batchSize}`, o.batchesInFlight !== undefined && `${o.batchesInFlight} in flight`].filter(Boolean).join(', ');
}

export async function drain(pool: pg.Pool, o: DrainOptions): Promise<SectionResult<DrainData>> {
  const keys = o.keys ?? KEYS;
  const d = await relayDrain(pool, o.rows, 'drain', {}, keys);
  const ceiling = platformaticCeiling;
  const rows: Row[] = [
    row('2. drain', `relay, ${fmt(o.rows)}-row backlog, defaults (producer platformatic)`, `${fmt(d.rowsPerSecond)} rows/s`, '≥ 20,000', d.rowsPerSecond >= 20_000, [d.ran]),
    row('2. drain', 'relay at defaults / its adapter\'s raw ceiling (raw @platformatic/kafka)', `${fmt(d.rowsPerSecond / ceiling, 2)}`, '≥ 0.4', d.rowsPerSecond / ceiling >= 0.4, [d.ran, armHere('raw', 'platformatic')]),
    row('2. drain', 'share of batch time spent waiting for Kafka, defaults (producer platformatic)', `${fmt(d.sendShare * 100)} % (${fmt(d.batches)} batches)`, undefined, undefined, [d.ran]),
  ];
  const compared: DrainData['compared'] = [];
  for (const relayOptions of o.compare) {
    const c = await relayDrain(pool, o.rows, `drain, ${describe(relayOptions)}`, relayOptions, keys);
    compared.push({ relayOptions, rowsPerSecond: c.rowsPerSecond, sendShare: c.sendShare });
    rows.push(row('2. drain', `relay, ${describe(relayOptions)} (a setting, for comparison)`, `${fmt(c.rowsPerSecond)} rows/s, ${fmt(c.rowsPerSecond / d.rowsPerSecond, 2)} × the defaults`, undefined, undefined, [c.ran]));
  }
  // The other producer adapter, at the defaults otherwise, against its own raw ceiling (ceiling 1).
  const kj = await relayDrain(pool, o.rows, 'drain, producer kafkajs', { producer: 'kafkajs' }, keys);
  rows.push(
    row('2. drain', 'relay, producer kafkajs, otherwise defaults (beside it the default, platformatic)', `${fmt(kj.rowsPerSecond)} rows/s; the default (platformatic) relay is ${fmt(d.rowsPerSecond / kj.rowsPerSecond, 2)} × it; ${fmt(kj.sendShare * 100)} % of batch time waiting for Kafka`, undefined, undefined, [kj.ran, d.ran]),
    row('2. drain', 'relay kafkajs / ceiling 1 (raw kafkajs)', `${fmt(kj.rowsPerSecond / o.ceiling, 2)}`, '≥ 0.6', kj.rowsPerSecond / o.ceiling >= 0.6, [kj.ran, armHere('raw', 'kafkajs')]),
    // What the default adapter is judged on beside its rate (issue 21, target 3): the relay
    // process's own CPU per row, which bounds the drain on one event loop.
    row(
      '2. drain',
      'relay process CPU-s per 100k rows, default (platformatic) / kafkajs',
      `${fmt(d.processCpuPer100k, 2)} / ${fmt(kj.processCpuPer100k, 2)}; platformatic / kafkajs ${fmt(d.processCpuPer100k / kj.processCpuPer100k, 2)}`,
      undefined,
      undefined,
      [d.ran, kj.ran],
    ),
  );
  return {
    data: {
      rows: o.rows,
      rowsPerSecond: d.rowsPerSecond,
      sendShare: d.sendShare,
      batches: d.batches,
      peakRss: d.peakRss,
      ceiling,
      compared,
      kafkajs: { rowsPerSecond: kj.rowsPerSecond, sendShare: kj.sendShare, batches: kj.batches, peakRss: kj.peakRss, ceiling: o.ceiling, processCpuPer100k: kj.processCpuPer100k },
      processCpuPer100k: d.processCpuPer100k,
    },
    rows,
    plots: [
      {
        file: 'drain-throughput.svg',
        chart: { title: `Relay drain of a ${fmt(o.rows)}-row backlog`, xLabel: 'seconds since the first acknowledged batch', yLabel: 'rows/s (0.5 s bins)', series: [
            { name: 'relay, defaults (platformatic)', points: d.series },
            { name: 'relay, producer kafkajs', points: kj.series },
          ],
        },
      },
    ],
  };
}
