/**
 * 20. Encodings (issue 38): Avro against JSON, side by side in one run, the arms' order
 * rotating round by round. Each arm drains the same committed, vacuumed backlog
 * (bench/common.ts fillBacklog: `{i, type, pad}` rows) with a relay process at its defaults
 * (bench/relayDrain.ts): the JSON arm as today, the Avro arm with one rule encoding every
 * topic's values with bench/schemas/benchRow.avsc through a real Apicurio registry
 * (scripts/localRegistry.ts), registered at start and cached from then on.
 *
 * Rows/s and the relay process's CPU-seconds per 100,000 rows (and its Postgres backends'),
 * medians over the rounds. Target: Avro's relay-process CPU per row at most 1.3 x JSON's.
 *
 * Each arm checks what it ran: the client the relay announced (platformatic, the default),
 * every row acknowledged, and how many of them went out in Confluent's wire format, counted
 * by the relay child at the client's send (bench/child.ts): all of the Avro arm's, none of
 * the JSON arm's. A run where that differs fails.
 */
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { relayDrain, type Drain } from '../relayDrain.js';
import { distinctArms } from '../armFacts.js';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, log, median } from '../util.js';
import { startLocalRegistry } from '../../scripts/localRegistry.js';

const S = '20. encodings';
const AVRO_SCHEMA = fileURLToPath(new URL('../schemas/benchRow.avsc', import.meta.url));

export interface EncodingsOptions {
  rows: number;
  rounds: number;
}

interface ArmRun {
  arm: 'json' | 'avro';
  round: number;
  rowsPerSecond: number;
  relayCpu: number;
  postgresCpu: number;
  framed: number;
}

export interface EncodingsData {
  rows: number;
  runs: ArmRun[];
  median: Record<'json' | 'avro', { rowsPerSecond: number; relayCpu: number; postgresCpu: number }>;
  cpuRatio: number;
}

export async function encodings(pool: pg.Pool, o: EncodingsOptions): Promise<SectionResult<EncodingsData>> {
  const registry = await startLocalRegistry();
  try {
    const arms = {
      json: {},
      avro: { encodings: { schemaRegistry: { url: registry.url }, rules: [{ topic: '/.*/', value: { format: 'avro', schema: { file: AVRO_SCHEMA } } }] } },
    } as const;
    const runs: ArmRun[] = [];
    const drains: Drain[] = [];
    for (let round = 0; round < o.rounds; round++) {
      const order: Array<'json' | 'avro'> = round % 2 === 0 ? ['json', 'avro'] : ['avro', 'json'];
      for (const arm of order) {
        const d = await relayDrain(pool, o.rows, `${S}, ${arm}, round ${round + 1}`, arms[arm]);
        if (d.distinctAcked !== o.rows) throw new Error(`${S}: the ${arm} arm acknowledged ${d.distinctAcked} distinct rows of ${o.rows}`);
        if (d.ran.client !== 'platformatic') throw new Error(`${S}: the ${arm} arm ran ${d.ran.client}, not the default client (platformatic)`);
        const wantFramed = arm === 'avro' ? o.rows : 0;
        if (d.ackedFramed !== wantFramed) throw new Error(`${S}: the ${arm} arm sent ${d.ackedFramed} rows in Confluent's wire format, not ${wantFramed}`);
        drains.push(d);
        runs.push({ arm, round, rowsPerSecond: d.rowsPerSecond, relayCpu: d.processCpuPer100k, postgresCpu: d.postgresCpuPer100k, framed: d.ackedFramed });
        log(`${S}, ${arm}, round ${round + 1}: ${fmt(d.rowsPerSecond)} rows/s, relay ${fmt(d.processCpuPer100k, 2)} CPU-s/100k rows`);
      }
    }
    const m = (arm: 'json' | 'avro') => {
      const of = runs.filter((r) => r.arm === arm);
      return { rowsPerSecond: median(of.map((r) => r.rowsPerSecond)), relayCpu: median(of.map((r) => r.relayCpu)), postgresCpu: median(of.map((r) => r.postgresCpu)) };
    };
    const med = { json: m('json'), avro: m('avro') };
    const cpuRatio = med.avro.relayCpu / med.json.relayCpu;
    const ran = distinctArms(drains.map((d) => d.ran));
    const rows: Row[] = [
      row(S, `drain of ${fmt(o.rows)} rows, JSON (producer platformatic, defaults), median of ${o.rounds}`, `${fmt(med.json.rowsPerSecond)} rows/s; relay ${fmt(med.json.relayCpu, 2)} + backends ${fmt(med.json.postgresCpu, 2)} CPU-s per 100k rows`, undefined, undefined, ran),
      row(S, `drain of ${fmt(o.rows)} rows, Avro through the registry (producer platformatic), median of ${o.rounds}`, `${fmt(med.avro.rowsPerSecond)} rows/s; relay ${fmt(med.avro.relayCpu, 2)} + backends ${fmt(med.avro.postgresCpu, 2)} CPU-s per 100k rows`, undefined, undefined, ran),
      row(S, 'Avro / JSON: relay process CPU per row', `${fmt(cpuRatio, 2)} x (rows/s ${fmt(med.avro.rowsPerSecond / med.json.rowsPerSecond, 2)} x)`, '≤ 1.3 x', cpuRatio <= 1.3, ran),
    ];
    return { data: { rows: o.rows, runs, median: med, cpuRatio }, rows };
  } finally {
    await registry.stop();
  }
}
