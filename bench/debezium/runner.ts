/**
 * The Debezium arm's process: bench/debezium/DebeziumRunner.java (Debezium embedded, the
 * Postgres connector with pgoutput, the outbox EventRouter, an idempotent KafkaProducer),
 * its jars fetched by scripts/debezium-fetch.sh and the runner compiled with javac into
 * .cache/debezium once per bench process. The parent reads its JSON progress lines.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const LIBS = join(ROOT, '.cache/debezium/libs');
const CLASSES = join(ROOT, '.cache/debezium/classes');
const CLASSPATH = `${CLASSES}:${LIBS}/*`;

/** The versions in bench/debezium/pom.xml, for the report. */
export const DEBEZIUM_VERSION = '3.6.1.Final';

let built = false;

/** Fetch the jars (no-op when there) and compile the runner, once per process. */
export function buildDebeziumRunner(): void {
  if (built) return;
  execFileSync(join(ROOT, 'scripts/debezium-fetch.sh'), { stdio: ['ignore', 'inherit', 'inherit'] });
  mkdirSync(CLASSES, { recursive: true });
  execFileSync('javac', ['-d', CLASSES, '-cp', `${LIBS}/*`, join(ROOT, 'bench/debezium/DebeziumRunner.java')], { stdio: ['ignore', 'inherit', 'inherit'] });
  built = true;
}

export interface DebeziumOptions {
  /** `postgres://user@host:port/db` (trust authentication: no password is passed). */
  databaseUrl: string;
  /** Schema of the `outboxevent` table; its publication and slot exist already. */
  schema: string;
  publication: string;
  slot: string;
  brokers: string[];
  /** poll.interval.ms; Debezium's default (500) when omitted. */
  pollIntervalMs?: number;
}

/** The engine's and the producer's settings, as the runner's key=value arguments. */
export function debeziumArguments(o: DebeziumOptions): string[] {
  const url = new URL(o.databaseUrl);
  const settings: Record<string, string> = {
    name: 'bench-debezium',
    'connector.class': 'io.debezium.connector.postgresql.PostgresConnector',
    // A fresh slot per arm, streamed from its start: no offsets to keep across runs.
    'offset.storage': 'org.apache.kafka.connect.storage.MemoryOffsetBackingStore',
    'database.hostname': url.hostname,
    'database.port': url.port || '5432',
    'database.user': decodeURIComponent(url.username || 'postgres'),
    'database.dbname': url.pathname.slice(1) || 'postgres',
    'topic.prefix': 'bench',
    'plugin.name': 'pgoutput',
    'slot.name': o.slot,
    'publication.name': o.publication,
    // The publication covers the outbox table only, made by the bench.
    'publication.autocreate.mode': 'disabled',
    'table.include.list': `${o.schema}.outboxevent`,
    // The backlog is in the WAL after the slot was made: stream it, no snapshot.
    'snapshot.mode': 'no_data',
    transforms: 'outbox',
    'transforms.outbox.type': 'io.debezium.transforms.outbox.EventRouter',
    // Routed by aggregatetype, which holds the Kafka topic itself (the relay's topic column).
    'transforms.outbox.route.topic.replacement': '${routedByValue}',
    'producer.bootstrap.servers': o.brokers.join(','),
    'producer.client.id': 'bench-debezium',
  };
  if (o.pollIntervalMs !== undefined) settings['poll.interval.ms'] = String(o.pollIntervalMs);
  return Object.entries(settings).map(([k, v]) => `${k}=${v}`);
}

export interface DebeziumProcess {
  process: ChildProcess;
  /** From its latest progress line: records handed to the producer, acknowledged by Kafka. */
  sent: number;
  acked: number;
  /** Wall ms of the first and latest acknowledgement; records acknowledged within 1 ms of the first. */
  firstAck: number;
  lastAck: number;
  ackedAtFirst: number;
  /** Every progress line's [lastAck, acked], in order (for the rate over a part of a drain). */
  progress: Array<[number, number]>;
  /** Set when the process exited before stop() was called. */
  exitError: Error | undefined;
  stop(): Promise<void>;
}

/** Starts the runner; it connects, then streams from the slot. */
export function startDebezium(o: DebeziumOptions): DebeziumProcess {
  buildDebeziumRunner();
  const proc = spawn('java', ['-Dorg.slf4j.simpleLogger.defaultLogLevel=warn', '-cp', CLASSPATH, 'DebeziumRunner', ...debeziumArguments(o)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stopping = false;
  const d: DebeziumProcess = {
    process: proc,
    sent: 0,
    acked: 0,
    firstAck: 0,
    lastAck: 0,
    ackedAtFirst: 0,
    progress: [],
    exitError: undefined,
    stop: async () => {
      stopping = true;
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const closed = new Promise((r) => proc.once('close', r));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
      await closed;
      clearTimeout(timer);
    },
  };
  proc.once('exit', (code, signal) => {
    if (!stopping) d.exitError = new Error(`the Debezium runner exited (${code ?? signal}) before it was stopped`);
  });
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    if (!line.startsWith('{')) return;
    try {
      const m = JSON.parse(line) as Pick<DebeziumProcess, 'sent' | 'acked' | 'firstAck' | 'lastAck' | 'ackedAtFirst'>;
      Object.assign(d, { sent: m.sent, acked: m.acked, firstAck: m.firstAck, lastAck: m.lastAck, ackedAtFirst: m.ackedAtFirst });
      d.progress.push([m.lastAck, m.acked]);
    } catch {
      // not a progress line
    }
  });
  return d;
}
