/**
 * A real Apache Kafka broker (KRaft, combined broker and controller; one node, or a cluster
 * of several) on 127.0.0.1, started from the jars scripts/kafka-fetch.sh downloads. Used by the tests,
 * the demo and the benchmarks; never by the relay itself.
 *
 * As a command:
 *   tsx scripts/localKafka.ts start [--dir DIR] [--port N]   prints the broker address
 *   tsx scripts/localKafka.ts start --nodes 3 [--dir DIR]     a 3-node cluster; prints the addresses
 *   tsx scripts/localKafka.ts stop  [--dir DIR]
 *
 * startLocalKafkaCluster() runs N combined broker+controller nodes (KRaft quorum of N
 * voters, replication factor 3, min.insync.replicas 2, unclean leader election off), with
 * kill/stop/start of one node by id (scripts/localKafkaCluster.ts) for the fault suite.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLASSPATH, LOG4J, ROOT, fetchKafkaJars, java, killPid, portTaken, serverProperties, waitUntilReady, withLogs, type LocalKafka } from './kafkaProcess.js';
import { startLocalKafkaCluster, stopLocalKafkaCluster } from './localKafkaCluster.js';
import { startOnFreePorts, type PortSource } from './ports.js';

export { fetchKafkaJars, type LocalKafka } from './kafkaProcess.js';
export { killLocalKafkaClusterSync, startLocalKafkaCluster, stopLocalKafkaCluster, type LocalKafkaCluster, type LocalKafkaClusterOptions, type LocalKafkaNode } from './localKafkaCluster.js';

export interface LocalKafkaOptions {
  /** Directory for config, data and logs; wiped at start unless `keepData`. */
  dir?: string;
  /** Client port; a free one when omitted. */
  port?: number;
  /** Milliseconds to wait for the broker to answer metadata requests. */
  readyTimeoutMs?: number;
  /** Detach the JVM so it outlives this process (the `start` command). */
  detached?: boolean;
  /**
   * Also open a SASL_PLAINTEXT listener (on a free port, see `saslBrokers`) that accepts
   * SCRAM-SHA-256 and SCRAM-SHA-512 for this one user, whose credentials are created when
   * the storage is formatted. The PLAINTEXT listener stays as it is.
   */
  scram?: { username: string; password: string };
  /** Broker properties to set on top of the defaults, e.g. `{ 'auto.create.topics.enable': 'false' }`. */
  properties?: Record<string, string>;
  /** Where the picked ports come from (tests hand out a taken one); `freePorts` by default. */
  portSource?: PortSource;
}


/** Format a fresh log directory and start a broker; resolves when it serves metadata. */
export async function startLocalKafka(options: LocalKafkaOptions = {}): Promise<LocalKafka> {
  fetchKafkaJars();
  const dir = resolve(options.dir ?? join(ROOT, '.cache/kafka/run', `broker-${process.pid}-${Date.now()}`));
  const count = (options.port === undefined ? 1 : 0) + 1 + (options.scram ? 1 : 0);
  // A port the caller chose stays taken: only a picked one is worth picking again.
  const retriable = (error: unknown): boolean => portTaken(error) && !(options.port !== undefined && String((error as Error).message).includes(`:${options.port}:`));
  return startOnFreePorts(count, (ports) => startBroker(dir, options, ports), retriable, { source: options.portSource });
}

async function startBroker(dir: string, options: LocalKafkaOptions, picked: number[]): Promise<LocalKafka> {
  const ports = [...picked];
  const port = options.port ?? (ports.shift() as number);
  const controllerPort = ports.shift() as number;
  const saslPort = options.scram ? ports.shift() : undefined;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const props = join(dir, 'server.properties');
  // Later lines of a properties file win: the overrides go last.
  const overrides = Object.entries(options.properties ?? {}).map(([name, value]) => `${name}=${value}\n`).join('');
  writeFileSync(props, serverProperties(dir, port, controllerPort, saslPort) + overrides);
  writeFileSync(join(dir, 'log4j.properties'), LOG4J);
  const clusterId = execFileSync('java', ['-cp', CLASSPATH, 'kafka.tools.StorageTool', 'random-uuid'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  const scram = options.scram
    ? ['SCRAM-SHA-256', 'SCRAM-SHA-512'].flatMap((m) => ['--add-scram', `${m}=[name=${options.scram?.username},password=${options.scram?.password}]`])
    : [];
  execFileSync('java', ['-cp', CLASSPATH, 'kafka.tools.StorageTool', 'format', '-t', clusterId, '-c', props, ...scram], { stdio: 'ignore' });

  const brokers = `127.0.0.1:${port}`;
  const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
  let child: ChildProcess | undefined;
  let pid = 0;

  const stop = async (graceMs?: number): Promise<void> => {
    if (pid) await killPid(pid, graceMs);
    pid = 0;
  };
  const start = async (): Promise<void> => {
    child = java(['kafka.Kafka', props], dir, options.detached ?? false);
    pid = child.pid ?? 0;
    writeFileSync(join(dir, 'broker.pid'), String(pid));
    if (options.detached) child.unref();
    try {
      await waitUntilReady(brokers, readyTimeoutMs, child, dir);
    } catch (error) {
      // Nobody gets a handle on a broker that failed to start: left running, its JVM
      // (detached, for the `start` command) would hold its ports and memory for good.
      await stop(0);
      rmSync(join(dir, 'broker.pid'), { force: true });
      throw withLogs(error, [dir]);
    }
  };
  await start();
  return {
    brokers,
    port,
    ...(saslPort === undefined ? {} : { saslBrokers: `127.0.0.1:${saslPort}` }),
    dir,
    stop: () => stop(),
    start,
    restart: async () => {
      await stop();
      await start();
    },
    destroy: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Stop a broker started detached in `dir` (reads its pid file). */
export async function stopLocalKafka(dir: string): Promise<void> {
  const file = join(resolve(dir), 'broker.pid');
  if (!existsSync(file)) return;
  await killPid(Number(readFileSync(file, 'utf8')));
  rmSync(file, { force: true });
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const flag = (name: string): string | undefined => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : undefined;
  };
  const dir = flag('--dir') ?? join(ROOT, '.cache/kafka/run/default');
  const nodes = flag('--nodes');
  if (command === 'start' && nodes !== undefined && nodes !== '1') {
    const kafka = await startLocalKafkaCluster({ dir, nodes: Number(nodes), detached: true });
    process.stdout.write(`${kafka.brokers}\n`);
  } else if (command === 'start') {
    const port = flag('--port');
    const kafka = await startLocalKafka({ dir, port: port ? Number(port) : undefined, detached: true });
    process.stdout.write(`${kafka.brokers}\n`);
  } else if (command === 'stop') {
    await stopLocalKafka(dir);
    await stopLocalKafkaCluster(dir);
  } else {
    process.stderr.write('usage: localKafka.ts start|stop [--dir DIR] [--port N | --nodes N]\n');
    process.exit(2);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`localKafka: ${(error as Error).message}\n`);
    process.exit(1);
  });
}
