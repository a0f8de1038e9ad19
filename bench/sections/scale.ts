/**
 * 5. Scale: one relay process against two on the same outbox (the relays settle their
 * shards on an empty outbox, then the rows are committed in one transaction; the clock runs
 * from that commit to no unsent row), rounds alternating; optionally the per-key order of
 * what they published, read back from Kafka. Then the drain of a small against a big
 * backlog, and the relay's RSS while it drains them.
 */
import type pg from 'pg';
import { getStatus } from '../../src/commands/status.js';
import { HEADERS } from '../../src/shared/kafka.js';
import { startChild } from '../children.js';
import { KEYS, PARTITIONS, benchSchema, createTopic, fillBacklog, kafka } from '../common.js';
import { relayDrain } from '../relayDrain.js';
import { row, type Plot, type Row, type SectionResult } from '../report.js';
import { fmt, log, mean, until, wall } from '../util.js';

export interface ScaleOptions {
  /** Rows committed at once for one relay and for two. */
  rows: number;
  rounds: number;
  /** Read each run's topic back and count per-key reorderings (first deliveries). */
  checkOrder?: boolean;
  /** The small and the big backlog (both, or the backlog part is left out). */
  backlogs?: { small: number; big: number };
}

export interface ScaleData {
  one: number[];
  two: number[];
  reorderings?: number[];
  small?: { backlog: number; rowsPerSecond: number; peakRss: number };
  big?: { backlog: number; rowsPerSecond: number; peakRss: number };
}

/** Messages whose outbox id is below one already seen for their key (first deliveries only). */
async function reorderings(topic: string, total: number): Promise<number> {
  const c = kafka().consumer({ groupId: `bench-check-${Date.now()}`, maxWaitTimeInMs: 100 });
  const first = new Set<string>();
  const lastOfKey = new Map<string, number>();
  let bad = 0;
  await c.connect();
  try {
    await c.subscribe({ topic, fromBeginning: true });
    await c.run({
      eachMessage: async ({ message }) => {
        const id = message.headers?.[HEADERS.messageId]?.toString() ?? '';
        if (first.has(id)) return;
        first.add(id);
        const key = message.key?.toString() ?? '';
        const outboxId = Number(message.headers?.[HEADERS.outboxId]?.toString());
        if (outboxId < (lastOfKey.get(key) ?? 0)) bad++;
        lastOfKey.set(key, Math.max(outboxId, lastOfKey.get(key) ?? 0));
      },
    });
    await until('every message read back', () => first.size >= total, 120_000, 50);
  } finally {
    await c.disconnect();
  }
  return bad;
}

async function relaysDrain(pool: pg.Pool, relays: number, total: number, checkOrder: boolean): Promise<{ rowsPerSecond: number; reorderings?: number }> {
  const { schema, drop } = await benchSchema(pool, 'benchscale');
  const topic = await createTopic(PARTITIONS);
  const children = Array.from({ length: relays }, () => startChild('relay', { BENCH_SCHEMA: schema, BENCH_RELAY_OPTIONS: JSON.stringify({ leaseTtlMs: 3000 }) }));
  try {
    await Promise.all(children.map((c) => c.ready));
    await until(
      'relays to settle their shards',
      async () => {
        const s = await getStatus({ client: pool as never, schema });
        const counts = s.relays.filter((r) => r.live).map((r) => r.shardCount);
        return counts.length === relays && counts.every((c) => c === 256 / relays);
      },
      60_000,
    );
    // One transaction: the backlog becomes visible at once; the clock runs from its commit.
    const client = await pool.connect();
    await client.query('BEGIN');
    await fillBacklog(client as unknown as pg.Pool, schema, topic, total, KEYS, false);
    await client.query('COMMIT');
    client.release();
    const started = wall();
    const unsent = async (): Promise<boolean> =>
      (await pool.query<{ any: boolean }>(`SELECT EXISTS (SELECT 1 FROM "${schema}".outbox WHERE sent_at IS NULL) AS any`)).rows[0]!.any;
    await until('the backlog drained', async () => !(await unsent()), 1_800_000, 100);
    const rowsPerSecond = total / ((wall() - started) / 1000);
    return checkOrder ? { rowsPerSecond, reorderings: await reorderings(topic, total) } : { rowsPerSecond };
  } finally {
    await Promise.all(children.map((c) => c.stop()));
    await drop();
  }
}

export async function scale(pool: pg.Pool, o: ScaleOptions): Promise<SectionResult<ScaleData>> {
  const data: ScaleData = { one: [], two: [], ...(o.checkOrder && { reorderings: [] }) };
  for (let round = 0; round < o.rounds; round++) {
    for (const [relays, into] of [[1, data.one], [2, data.two]] as const) {
      const r = await relaysDrain(pool, relays, o.rows, o.checkOrder ?? false);
      into.push(r.rowsPerSecond);
      if (r.reorderings !== undefined) data.reorderings?.push(r.reorderings);
    }
    log(`scale round ${round + 1}: one relay ${fmt(data.one.at(-1)!)}, two ${fmt(data.two.at(-1)!)} rows/s${data.reorderings ? `, reorderings ${data.reorderings.slice(-2).join(' and ')}` : ''}`);
  }
  const rows: Row[] = [
    row('5. scale', `one relay, ${fmt(o.rows)} rows committed at once`, `${fmt(mean(data.one))} rows/s`),
    row('5. scale', 'two relays', `${fmt(mean(data.two))} rows/s`),
    row('5. scale', 'two / one', fmt(mean(data.two) / mean(data.one), 2), '≥ 1.0', mean(data.two) / mean(data.one) >= 1.0),
  ];
  if (data.reorderings) {
    const bad = data.reorderings.reduce((a, b) => a + b, 0);
    rows.push(row('5. scale', `per-key reorderings by outbox id, first deliveries (${data.reorderings.length} runs)`, fmt(bad), '0', bad === 0));
  }
  const plots: Plot[] = [];
  if (o.backlogs) {
    const { small: smallRows, big: bigRows } = o.backlogs;
    const small = await relayDrain(pool, smallRows, 'small backlog');
    const big = await relayDrain(pool, bigRows, 'big backlog');
    data.small = { backlog: smallRows, rowsPerSecond: small.rowsPerSecond, peakRss: small.peakRss };
    data.big = { backlog: bigRows, rowsPerSecond: big.rowsPerSecond, peakRss: big.peakRss };
    const mib = (b: number): number => b / 2 ** 20;
    rows.push(
      row('5. scale', `drain, ${fmt(smallRows)}-row backlog`, `${fmt(small.rowsPerSecond)} rows/s`),
      row('5. scale', `drain, ${fmt(bigRows)}-row backlog`, `${fmt(big.rowsPerSecond)} rows/s`),
      row('5. scale', 'big / small backlog', fmt(big.rowsPerSecond / small.rowsPerSecond, 2), '≥ 0.9', big.rowsPerSecond / small.rowsPerSecond >= 0.9),
      row('5. scale', `relay peak RSS, ${fmt(smallRows)} / ${fmt(bigRows)} backlog`, `${fmt(mib(small.peakRss))} / ${fmt(mib(big.peakRss))} MiB`, '≤ 150 MB, flat', big.peakRss <= 150e6 && big.peakRss <= small.peakRss * 1.2),
    );
    plots.push(
      {
        file: 'backlog-throughput.svg',
        chart: { title: 'Relay drain: throughput over time', xLabel: 'seconds since the first acknowledged batch', yLabel: 'rows/s (0.5 s bins)', series: [{ name: `${fmt(bigRows)}-row backlog`, points: big.series }, { name: `${fmt(smallRows)}-row backlog`, points: small.series }] },
      },
      { file: 'backlog-rss.svg', chart: { title: `Relay RSS while draining a ${fmt(bigRows)}-row backlog`, xLabel: 'seconds since the first acknowledged batch', yLabel: 'RSS (MiB)', series: [{ name: 'relay process RSS', points: big.rss }] } },
    );
  }
  return { data, rows, plots };
}
