/**
 * 2. Drain: a backlog filled before the relay starts (INSERT … SELECT generate_series in
 * chunks, vacuumed), drained by a relay process at its defaults; rows/s from the first
 * acknowledged batch to the last, against ceiling 1; the share of batch time spent waiting
 * for Kafka; then other relay settings on the same size of backlog, for comparison; then
 * the platformatic producer adapter (`producer: 'platformatic'`) at the defaults, against
 * the kafkajs relay and its own client's raw ceiling (ceilings section).
 */
import type pg from 'pg';
import { KEYS } from '../common.js';
import { relayDrain } from '../relayDrain.js';
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
  rowsPerSecond: number;
  sendShare: number;
  batches: number;
  peakRss: number;
  compared: Array<{ relayOptions: DrainOptions['compare'][number]; rowsPerSecond: number; sendShare: number }>;
  /** The relay at its defaults with the platformatic producer adapter. */
  platformatic: { rowsPerSecond: number; sendShare: number; batches: number; peakRss: number; ceiling: number };
}

function describe(o: DrainOptions['compare'][number]): string {
  return [o.batchSize !== undefined && `batch ${o.batchSize}`, o.batchesInFlight !== undefined && `${o.batchesInFlight} in flight`].filter(Boolean).join(', ');
}

export async function drain(pool: pg.Pool, o: DrainOptions): Promise<SectionResult<DrainData>> {
  const keys = o.keys ?? KEYS;
  const d = await relayDrain(pool, o.rows, 'drain', {}, keys);
  const rows: Row[] = [
    row('2. drain', `relay, ${fmt(o.rows)}-row backlog, defaults`, `${fmt(d.rowsPerSecond)} rows/s`, '≥ 20,000', d.rowsPerSecond >= 20_000),
    row('2. drain', 'relay / ceiling 1', `${fmt(d.rowsPerSecond / o.ceiling, 2)}`, '≥ 0.6', d.rowsPerSecond / o.ceiling >= 0.6),
    row('2. drain', 'share of batch time spent waiting for Kafka', `${fmt(d.sendShare * 100)} % (${fmt(d.batches)} batches)`),
  ];
  const compared: DrainData['compared'] = [];
  for (const relayOptions of o.compare) {
    const c = await relayDrain(pool, o.rows, `drain, ${describe(relayOptions)}`, relayOptions, keys);
    compared.push({ relayOptions, rowsPerSecond: c.rowsPerSecond, sendShare: c.sendShare });
    rows.push(row('2. drain', `relay, ${describe(relayOptions)} (a setting, for comparison)`, `${fmt(c.rowsPerSecond)} rows/s, ${fmt(c.rowsPerSecond / o.ceiling, 2)} × ceiling 1`));
  }
  // The other producer adapter, at the defaults: part of this section (its compare list
  // is the caller's), against the kafkajs relay and the raw ceilings of both clients.
  const pl = await relayDrain(pool, o.rows, 'drain, producer platformatic', { producer: 'platformatic' }, keys);
  const fastest = Math.max(d.rowsPerSecond, pl.rowsPerSecond);
  const fastestCeiling = pl.rowsPerSecond > d.rowsPerSecond ? platformaticCeiling : o.ceiling;
  rows.push(
    row('2. drain', 'relay, producer platformatic, defaults', `${fmt(pl.rowsPerSecond)} rows/s, ${fmt(pl.rowsPerSecond / d.rowsPerSecond, 2)} × the kafkajs relay; ${fmt(pl.sendShare * 100)} % of batch time waiting for Kafka`),
    row('2. drain', 'relay platformatic / its raw ceiling (raw @platformatic/kafka)', `${fmt(pl.rowsPerSecond / platformaticCeiling, 2)}`),
    row('2. drain', `fastest adapter (${pl.rowsPerSecond > d.rowsPerSecond ? 'platformatic' : 'kafkajs'}) / the kafkajs relay`, `${fmt(fastest / d.rowsPerSecond, 2)}`, '≥ 1.8', fastest / d.rowsPerSecond >= 1.8),
    row('2. drain', 'fastest adapter / its raw ceiling', `${fmt(fastest / fastestCeiling, 2)}`, '≥ 0.75', fastest / fastestCeiling >= 0.75),
  );
  return {
    data: {
      rows: o.rows,
      rowsPerSecond: d.rowsPerSecond,
      sendShare: d.sendShare,
      batches: d.batches,
      peakRss: d.peakRss,
      compared,
      platformatic: { rowsPerSecond: pl.rowsPerSecond, sendShare: pl.sendShare, batches: pl.batches, peakRss: pl.peakRss, ceiling: platformaticCeiling },
    },
    rows,
    plots: [
      {
        file: 'drain-throughput.svg',
        chart: { title: `Relay drain of a ${fmt(o.rows)}-row backlog`, xLabel: 'seconds since the first acknowledged batch', yLabel: 'rows/s (0.5 s bins)', series: [
            { name: 'relay, defaults (kafkajs)', points: d.series },
            { name: 'relay, producer platformatic', points: pl.series },
          ],
        },
      },
    ],
  };
}
