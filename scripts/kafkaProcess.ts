/**
 * The JVM side of the local Kafka helpers (scripts/localKafka.ts, scripts/localKafkaCluster.ts):
 * a node's properties and logging, starting its JVM, waiting until it serves metadata, and
 * stopping it by pid.
 */
import '../src/shared/kafkajsIdleFix.js';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, openSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import { kafkaJitFlags } from './kafkaJit.js';
import { PORT_TAKEN } from './ports.js';

export const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const LIBS = join(ROOT, '.cache/kafka/libs');
export const CLASSPATH = `${LIBS}/*`;

/** A running local broker. */
export interface LocalKafka {
  /** `127.0.0.1:PORT`. */
  readonly brokers: string;
  readonly port: number;
  /** `127.0.0.1:PORT` of the SCRAM listener when started with `scram`. */
  readonly saslBrokers?: string;
  readonly dir: string;
  /** Stop the broker (SIGTERM, then SIGKILL after 30 s). Data stays in `dir`. */
  stop(): Promise<void>;
  /** Start it again on the same port and data. */
  start(): Promise<void>;
  /** Stop, then start. */
  restart(): Promise<void>;
  /** Stop and delete `dir`. */
  destroy(): Promise<void>;
}

export function fetchKafkaJars(): void {
  execFileSync(join(ROOT, 'scripts/kafka-fetch.sh'), { stdio: ['ignore', 'inherit', 'inherit'] });
}

/** A node of a cluster: its id, the quorum's voters, and the replication of internal and default topics. */
export interface NodeRole {
  nodeId: number;
  voters: string;
  replication: number;
  minInsync: number;
}

export function serverProperties(dir: string, port: number, controllerPort: number, saslPort?: number, role?: NodeRole): string {
  const sasl = saslPort === undefined ? '' : `,SASL_PLAINTEXT://127.0.0.1:${saslPort}`;
  const rf = role?.replication ?? 1;
  return [
    'process.roles=broker,controller',
    `node.id=${role?.nodeId ?? 1}`,
    `controller.quorum.voters=${role?.voters ?? `1@127.0.0.1:${controllerPort}`}`,
    `listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controllerPort}${sasl}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${port}${sasl}`,
    'controller.listener.names=CONTROLLER',
    `listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT${saslPort === undefined ? '' : ',SASL_PLAINTEXT:SASL_PLAINTEXT'}`,
    ...(saslPort === undefined
      ? []
      : [
          'sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512',
          'listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;',
          'listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;',
        ]),
    'inter.broker.listener.name=PLAINTEXT',
    `log.dirs=${join(dir, 'data')}`,
    'num.partitions=1',
    `offsets.topic.replication.factor=${rf}`,
    'offsets.topic.num.partitions=1',
    `transaction.state.log.replication.factor=${rf}`,
    `transaction.state.log.min.isr=${role?.minInsync ?? 1}`,
    'transaction.state.log.num.partitions=1',
    `min.insync.replicas=${role?.minInsync ?? 1}`,
    ...(role ? [`default.replication.factor=${rf}`, 'unclean.leader.election.enable=false'] : []),
    'group.initial.rebalance.delay.ms=0',
    'auto.create.topics.enable=true',
    'log.flush.interval.messages=9223372036854775807',
    '',
  ].join('\n');
}

export const LOG4J = [
  'log4j.rootLogger=WARN, file',
  'log4j.appender.file=org.apache.log4j.FileAppender',
  'log4j.appender.file.File=${kafka.logs.dir}/server.log',
  'log4j.appender.file.layout=org.apache.log4j.PatternLayout',
  'log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n',
  'log4j.logger.kafka.server.KafkaRaftServer=INFO',
  '',
].join('\n');

export function java(args: string[], dir: string, detached: boolean): ChildProcess {
  const out = openSync(join(dir, 'stdout.log'), 'a');
  return spawn(
    'java',
    [
      '-Xms256m',
      '-Xmx512m',
      '-XX:+UseSerialGC',
      ...kafkaJitFlags(),
      `-Dlog4j.configuration=file:${join(dir, 'log4j.properties')}`,
      `-Dkafka.logs.dir=${dir}`,
      '-cp',
      CLASSPATH,
      ...args,
    ],
    { stdio: ['ignore', out, out], detached },
  );
}

/** A failed start's error, with the end of each broker's own logs: why a JVM exited shows there. */
export function withLogs(error: unknown, dirs: string[]): Error {
  const tails = dirs.flatMap((d) =>
    ['stdout.log', 'server.log']
      .map((f) => join(d, f))
      .filter((f) => existsSync(f))
      .map((f) => `--- ${f} (end)\n${readFileSync(f, 'utf8').slice(-1500)}`),
  );
  const wrapped = new Error([(error as Error)?.message ?? String(error), ...tails].join('\n'));
  wrapped.cause = error;
  return wrapped;
}

/** Whether a start failed because a port picked for it was taken before the JVM bound it. */
export function portTaken(error: unknown): boolean {
  return PORT_TAKEN.test((error as Error)?.message ?? '');
}

function logSize(logDir: string): number {
  const file = join(logDir, 'server.log');
  return existsSync(file) ? statSync(file).size : 0;
}

/** The line of a node's log, past `from` (this start's part), that says it could not bind a port. */
function bindFailure(logDir: string, from: number): string | undefined {
  const file = join(logDir, 'server.log');
  if (logSize(logDir) <= from) return undefined;
  return readFileSync(file)
    .subarray(from)
    .toString('utf8')
    .split('\n')
    .find((line) => /failed to bind/.test(line) && PORT_TAKEN.test(line));
}

/**
 * Resolves once the node at `brokers` answers metadata and lists `expectBrokers` brokers.
 * Fails at once when the JVM exited, or when its log (in `logDir`) says a port was taken:
 * such a broker takes some 30 s to give up and exit by itself.
 */
export async function waitUntilReady(brokers: string, timeoutMs: number, child: ChildProcess | undefined, logDir: string, expectBrokers = 1): Promise<void> {
  // A short request timeout: whatever took the port may accept a connection and never answer,
  // and a broker that is slow to answer is only asked again.
  const kafka = new Kafka({ clientId: 'local-kafka-ready', brokers: brokers.split(','), logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 1000, requestTimeout: 3000 });
  const deadline = Date.now() + timeoutMs;
  // The log of earlier starts stays in the file; a bind failure of this one comes after it.
  const from = logSize(logDir);
  let lastError: unknown;
  while (Date.now() < deadline) {
    // Exit first, then the log: a JVM that exited for a taken port wrote so before it exited.
    const exitCode = child?.exitCode ?? null;
    const bind = bindFailure(logDir, from);
    if (bind !== undefined) throw new Error(`Kafka could not bind a port: ${bind}`);
    if (exitCode !== null) throw new Error(`Kafka exited with code ${exitCode} while starting`);
    const admin = kafka.admin();
    try {
      await admin.connect();
      // A metadata round trip, not just an open port: the broker is serving requests
      // (and, for a cluster, every node has registered with the controller).
      const seen = (await admin.describeCluster()).brokers.length;
      await admin.disconnect();
      if (seen >= expectBrokers) return;
      lastError = new Error(`${seen} of ${expectBrokers} brokers registered`);
      await new Promise((r) => setTimeout(r, 250));
      continue;
    } catch (error) {
      lastError = error;
      await admin.disconnect().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  throw new Error(`Kafka at ${brokers} not ready after ${timeoutMs} ms: ${(lastError as Error)?.message}`);
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return !alive(pid);
}

/** SIGTERM, and SIGKILL after `graceMs` (at once when 0: a broker that never started has nothing to flush). */
export async function killPid(pid: number, graceMs = 30_000): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid, graceMs === 0 ? 'SIGKILL' : 'SIGTERM');
  if (graceMs === 0) {
    await waitForExit(pid, 10_000);
    return;
  }
  if (!(await waitForExit(pid, graceMs))) {
    process.kill(pid, 'SIGKILL');
    await waitForExit(pid, 10_000);
  }
}
