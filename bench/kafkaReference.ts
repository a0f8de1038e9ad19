/**
 * Kafka's own producer doing what the relay's exactly-once units do, without Postgres
 * (bench/reference/TransactionCost.java, compiled here with javac against the jars
 * scripts/kafka-fetch.sh downloads): the reference section 16 sets the relay's
 * exactly-once cost against: what a transaction per unit's waiting rows costs on this
 * broker with Kafka's own client, beside what it costs the relay.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { promisify } from 'node:util';
import { compiledAgainstKafka, KAFKA_LIBS } from '../scripts/kafkaJava.js';
import { brokers, createTopic, name, PARTITIONS, PAYLOAD } from './common.js';

export interface ReferenceRun {
  /** `kafka-clients <version>`, as the client reported itself. */
  client: string;
  mode: 'transactions' | 'acks';
  units: number;
  retryBackoffMs: number;
  rows: number;
  transactions: number;
  /** Arrival → delivered per row, ms, sorted. */
  latencies: number[];
}


/** The kafka-clients version of the jars the reference runs on (from the jar's name). */
export function kafkaClientsVersion(): string {
  const jar = readdirSync(KAFKA_LIBS).find((f) => /^kafka-clients-[\d.]+\.jar$/.test(f));
  if (!jar) throw new Error(`bench: no kafka-clients jar in ${KAFKA_LIBS}`);
  return jar.replace(/^kafka-clients-|\.jar$/g, '');
}

/**
 * Run the reference at `rate` rows/s for `seconds` on a fresh topic of the bench's
 * partitions, and check it ran what was asked: the client, the mode, the units, a
 * transaction committed per group of rows in transactions mode and none otherwise.
 */
export async function runReference(o: { rate: number; seconds: number; mode: ReferenceRun['mode']; units: number; retryBackoffMs: number }): Promise<ReferenceRun> {
  const classes = compiledAgainstKafka('bench/reference/TransactionCost.java');
  const topic = await createTopic(PARTITIONS);
  const payloadBytes = Buffer.byteLength(PAYLOAD);
  const args = ['-cp', `${classes}:${KAFKA_LIBS}/*`, 'TransactionCost', brokers().join(','), topic, String(o.rate), String(o.seconds), o.mode, String(o.units), name('bench-ref'), String(payloadBytes), String(o.retryBackoffMs)];
  const { stdout } = await promisify(execFile)('java', args, { maxBuffer: 256 * 1024 * 1024, timeout: (o.seconds + 120) * 1000 });
  const out = JSON.parse(stdout.trim().split('\n').pop()!) as Omit<ReferenceRun, 'latencies'> & { latenciesMs: number[] };
  const expected = `kafka-clients ${kafkaClientsVersion()}`;
  const problems = [
    out.client !== expected && `client ${out.client}, expected ${expected}`,
    out.mode !== o.mode && `mode ${out.mode}, expected ${o.mode}`,
    out.units !== o.units && `${out.units} units, expected ${o.units}`,
    Number(out.retryBackoffMs) !== o.retryBackoffMs && `retry.backoff.ms ${out.retryBackoffMs}, expected ${o.retryBackoffMs}`,
    o.mode === 'transactions' ? !(out.transactions > 0) && 'no transaction committed' : out.transactions !== 0 && `${out.transactions} transactions in acks mode`,
    // A Poisson schedule: far fewer rows than offered means the arrivals fell behind.
    out.rows < o.rate * o.seconds * 0.9 && `${out.rows} rows at ${o.rate} rows/s for ${o.seconds} s`,
    out.latenciesMs.length !== out.rows && `${out.latenciesMs.length} latencies for ${out.rows} rows`,
  ].filter(Boolean);
  if (problems.length > 0) throw new Error(`bench: Kafka's own producer (${o.mode}, ${o.units} units) did not run as asked: ${problems.join('; ')}`);
  return { client: out.client, mode: out.mode, units: out.units, retryBackoffMs: Number(out.retryBackoffMs), rows: out.rows, transactions: out.transactions, latencies: [...out.latenciesMs].sort((a, b) => a - b) };
}
