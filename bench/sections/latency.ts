/**
 * 3. Latency at a steady offered load: pgbench writers (8 clients, Poisson arrivals at the
 * offered rate) insert one row per autocommit transaction stamped with clock_timestamp();
 * the relay process records when Kafka acknowledged each row, the consumer process (dedup +
 * a one-row effect, on the same Postgres) when its handler started on it. Commit → ack and
 * commit → handler per row, as percentiles.
 */
import type pg from 'pg';
import { randomUUID } from 'node:crypto';
import { startChild } from '../children.js';
import type { ArmFacts } from '../armFacts.js';
import { KEYS, PARTITIONS, PAYLOAD, benchSchema, createEffectsTable, createTopic } from '../common.js';
import { pgbench, tps } from '../pgbench.js';
import { row, type Row, type SectionResult } from '../report.js';
import type { Series } from '../svg.js';
import { fmt, percentileSeries, percentiles, until, type Percentiles } from '../util.js';

export interface LatencyOptions {
  /** Seconds of offered load per arm. */
  seconds: number;
  /** Offered rows/s, and whether our consumer runs on the same Postgres, in order. */
  arms: Array<{ rate: number; withConsumer: boolean }>;
}

export interface LatencyResult {
  offered: number;
  withConsumer: boolean;
  achieved: number;
  rows: number;
  ack: Percentiles;
  handler: Percentiles;
}

const TARGET_RATE = 1_000; // the target: p99 commit → ack ≤ 25 ms at 1,000 rows/s

/**
 * With `withConsumer`, `consumerMode` 'reader' puts a bare read_committed kafkajs reader
 * (bench/child.ts, no Postgres) where our consumer would be: `handler` is then commit →
 * fetched by it.
 */
export async function latencyAt(
  pool: pg.Pool,
  rate: number,
  seconds: number,
  withConsumer: boolean,
  relayOptions: Record<string, unknown> = {},
  consumerMode: 'consumer' | 'reader' = 'consumer',
): Promise<LatencyResult & { ackSorted: number[]; handlerSorted: number[]; ackedVia: () => Record<string, number>; ran: { relay: ArmFacts[]; beside: ArmFacts[] } }> {
  const { schema, drop } = await benchSchema(pool, 'benchlat');
  const topic = await createTopic(PARTITIONS);
  await createEffectsTable(pool, schema);
  const relay = startChild('relay', { BENCH_SCHEMA: schema, BENCH_RELAY_OPTIONS: JSON.stringify(relayOptions) });
  const consumer = withConsumer
    ? startChild(consumerMode, { BENCH_SCHEMA: schema, BENCH_TOPIC: topic, BENCH_GROUP: `bench-lat-${randomUUID()}`, BENCH_PARTITIONS: String(PARTITIONS) })
    : { ready: Promise.resolve(), acks: [] as Array<[number, number]>, stop: async () => undefined, ran: undefined };
  try {
    await Promise.all([relay.ready, consumer.ready]);
    // A first row through the whole path: the consumer has joined and is fetching.
    await pool.query(`INSERT INTO "${schema}".outbox (topic, key, payload) VALUES ($1, 'warm-up', '{}')`, [topic]);
    await until('the warm-up row through', () => (withConsumer ? consumer : relay).acks.length > 0, 60_000);
    // The writers: pgbench, 8 clients, a Poisson schedule at the offered rate. Each row is one
    // autocommit INSERT that stamps created_at with clock_timestamp(): the commit follows
    // within a fraction of a millisecond, so latencies measured from it are, if anything,
    // slightly long.
    const before = new Set((await pool.query<{ id: string }>(`SELECT id FROM "${schema}".outbox`)).rows.map((r) => Number(r.id)));
    const script = `\\set k random(1, ${KEYS})\nINSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}', clock_timestamp());\n`;
    const achieved = tps(await pgbench(script, ['-c', '8', '-j', '2', '-R', String(rate), '-T', String(seconds)]));
    const { rows: written } = await pool.query<{ id: string; t: number }>(`SELECT id, extract(epoch FROM created_at) * 1000 AS t FROM "${schema}".outbox`);
    const committed = new Map<number, number>();
    for (const r of written) if (!before.has(Number(r.id))) committed.set(Number(r.id), Number(r.t));
    await until(
      'every row acknowledged and handled',
      () => {
        const seen = new Set((withConsumer ? consumer : relay).acks.map((a) => a[0]));
        return [...committed.keys()].every((id) => seen.has(id));
      },
      300_000,
      250,
    );
    const firstAck = new Map<number, number>();
    for (const [id, t] of relay.acks) if (!firstAck.has(id)) firstAck.set(id, t);
    const firstHandled = new Map<number, number>();
    for (const [id, t] of consumer.acks) if (!firstHandled.has(id)) firstHandled.set(id, t);
    const ack: number[] = [];
    const handler: number[] = [];
    for (const [id, t] of committed) {
      const a = firstAck.get(id);
      const h = firstHandled.get(id);
      if (a !== undefined) ack.push(Math.max(0, a - t));
      if (h !== undefined) handler.push(Math.max(0, h - t));
    }
    ack.sort((a, b) => a - b);
    handler.sort((a, b) => a - b);
    // Rows acknowledged per client and mode: the relay's last line, which comes once it is stopped (below).
    const ackedVia = (): Record<string, number> => relay.timing?.ackedVia ?? {};
    // What the relay (and the consumer or reader beside it) reported it ran on, for the rows.
    const ran = { relay: [relay.ran!], beside: consumer.ran ? [consumer.ran] : [] };
    return { offered: rate, withConsumer, achieved, rows: committed.size, ack: percentiles(ack), handler: percentiles(handler), ackSorted: ack, handlerSorted: handler, ackedVia, ran };
  } finally {
    await Promise.all([relay.stop(), consumer.stop()]);
    await drop();
  }
}

export async function latency(pool: pg.Pool, o: LatencyOptions): Promise<SectionResult<LatencyResult[]>> {
  const f = (x: Percentiles): string => `p50 ${fmt(x.p50, 1)} / p95 ${fmt(x.p95, 1)} / p99 ${fmt(x.p99, 1)} ms`;
  const rows: Row[] = [];
  const data: LatencyResult[] = [];
  const series: Series[] = [];
  for (const { rate, withConsumer } of o.arms) {
    const { ackSorted, handlerSorted, ackedVia: _, ran, ...r } = await latencyAt(pool, rate, o.seconds, withConsumer);
    data.push(r);
    const where = withConsumer ? 'with the consumer on the same Postgres' : 'relay alone';
    const targeted = rate === TARGET_RATE;
    rows.push(row('3. latency', `${fmt(rate)} rows/s offered (${fmt(r.achieved)} achieved), ${where}: commit → Kafka ack`, f(r.ack), targeted ? 'p99 ≤ 25 ms' : undefined, targeted ? r.ack.p99 <= 25 : undefined, ran.relay));
    series.push({ name: `${fmt(rate)}/s commit → ack${withConsumer ? '' : ' (relay alone)'}`, points: percentileSeries(ackSorted) });
    if (withConsumer) {
      rows.push(row('3. latency', `${fmt(rate)} rows/s offered, commit → consumer handler`, f(r.handler), undefined, undefined, [...ran.relay, ...ran.beside]));
      series.push({ name: `${fmt(rate)}/s commit → handler`, points: percentileSeries(handlerSorted) });
    }
  }
  return { data, rows, plots: [{ file: 'latency-percentiles.svg', chart: { title: 'Latency distribution at a steady offered load', xLabel: 'percentile', yLabel: 'ms', series } }] };
}
