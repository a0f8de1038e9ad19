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
 * kill/stop/start of one node by id for the fault suite.
 */
import '../src/shared/kafkajsIdleFix.js';
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import { kafkaJitFlags } from './kafkaJit.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const LIBS = join(ROOT, '.cache/kafka/libs');
const CLASSPATH = `${LIBS}/*`;

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
}

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

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolvePort(address.port) : reject(new Error('no port'))));
    });
  });
}

/** A node of a cluster: its id, the quorum's voters, and the replication of internal and default topics. */
interface NodeRole {
  nodeId: number;
  voters: string;
  replication: number;
  minInsync: number;
}

function serverProperties(dir: string, port: number, controllerPort: number, saslPort?: number, role?: NodeRole): string {
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

const LOG4J = [
  'log4j.rootLogger=WARN, file',
  'log4j.appender.file=org.apache.log4j.FileAppender',
  'log4j.appender.file.File=${kafka.logs.dir}/server.log',
  'log4j.appender.file.layout=org.apache.log4j.PatternLayout',
  'log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n',
  'log4j.logger.kafka.server.KafkaRaftServer=INFO',
  '',
].join('\n');

function java(args: string[], dir: string, detached: boolean): ChildProcess {
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

async function waitUntilReady(brokers: string, timeoutMs: number, child: ChildProcess | undefined, expectBrokers = 1): Promise<void> {
  const kafka = new Kafka({ clientId: 'local-kafka-ready', brokers: brokers.split(','), logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 1000 });
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null) throw new Error(`Kafka exited with code ${child.exitCode} while starting`);
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

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return !alive(pid);
}

async function killPid(pid: number): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid, 'SIGTERM');
  if (!(await waitForExit(pid, 30_000))) {
    process.kill(pid, 'SIGKILL');
    await waitForExit(pid, 10_000);
  }
}

/** Format a fresh log directory and start a broker; resolves when it serves metadata. */
export async function startLocalKafka(options: LocalKafkaOptions = {}): Promise<LocalKafka> {
  fetchKafkaJars();
  const dir = resolve(options.dir ?? join(ROOT, '.cache/kafka/run', `broker-${process.pid}-${Date.now()}`));
  const port = options.port ?? (await freePort());
  const controllerPort = await freePort();
  const saslPort = options.scram ? await freePort() : undefined;
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

  const stop = async (): Promise<void> => {
    if (pid) await killPid(pid);
    pid = 0;
  };
  const start = async (): Promise<void> => {
    child = java(['kafka.Kafka', props], dir, options.detached ?? false);
    pid = child.pid ?? 0;
    writeFileSync(join(dir, 'broker.pid'), String(pid));
    if (options.detached) child.unref();
    try {
      await waitUntilReady(brokers, readyTimeoutMs, child);
    } catch (error) {
      // Nobody gets a handle on a broker that failed to start: left running, its JVM
      // (detached, for the `start` command) would hold its ports and memory for good.
      await stop();
      rmSync(join(dir, 'broker.pid'), { force: true });
      throw error;
    }
  };
  await start();
  return {
    brokers,
    port,
    ...(saslPort === undefined ? {} : { saslBrokers: `127.0.0.1:${saslPort}` }),
    dir,
    stop,
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

/** Options of a local cluster of combined broker+controller nodes. */
export interface LocalKafkaClusterOptions {
  /** Directory for every node's config, data and logs (`node-<id>/`); wiped at start. */
  dir?: string;
  /** Nodes, each a broker and a controller voter (default 3). */
  nodes?: number;
  /** Milliseconds to wait for every node to register and answer metadata requests. */
  readyTimeoutMs?: number;
  /** Detach the JVMs so they outlive this process (the `start --nodes N` command). */
  detached?: boolean;
  /** Broker properties to set on every node on top of the defaults, as for startLocalKafka. */
  properties?: Record<string, string>;
}

/** One node of a local cluster. */
export interface LocalKafkaNode {
  /** KRaft node id, 1..N (the broker id kafkajs metadata reports). */
  readonly id: number;
  readonly port: number;
  /** `127.0.0.1:PORT`. */
  readonly address: string;
  readonly dir: string;
  /** Pid of its JVM, or 0 while it is down. */
  pid(): number;
}

/**
 * A running local cluster: N nodes on 127.0.0.1, replication factor N (at most 3) for the
 * internal topics and for topics created without one, `min.insync.replicas` N-1 (at least
 * 1), unclean leader election off. The LocalKafka methods act on every node; the *Node
 * methods on one.
 */
export interface LocalKafkaCluster extends LocalKafka {
  readonly nodes: readonly LocalKafkaNode[];
  /** SIGKILL one node and wait until its process is gone. */
  killNode(id: number): Promise<void>;
  /** SIGTERM one node (SIGKILL after 30 s) and wait until it is gone. */
  stopNode(id: number): Promise<void>;
  /** Start a stopped node on its port and data; resolves when it answers metadata requests
   *  itself and the cluster lists every node. */
  startNode(id: number): Promise<void>;
  restartNode(id: number): Promise<void>;
}

/** Format N nodes of one cluster and start them; resolves when the cluster lists N brokers. */
export async function startLocalKafkaCluster(options: LocalKafkaClusterOptions = {}): Promise<LocalKafkaCluster> {
  fetchKafkaJars();
  const count = options.nodes ?? 3;
  if (!Number.isInteger(count) || count < 1 || count > 9) throw new Error(`nodes must be 1-9, not ${count}`);
  const dir = resolve(options.dir ?? join(ROOT, '.cache/kafka/run', `cluster-${process.pid}-${Date.now()}`));
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const ids = Array.from({ length: count }, (_, i) => i + 1);
  const ports = await Promise.all(ids.map(() => freePort()));
  const controllerPorts = await Promise.all(ids.map(() => freePort()));
  const voters = ids.map((id, i) => `${id}@127.0.0.1:${controllerPorts[i]}`).join(',');
  const replication = Math.min(3, count);
  const minInsync = Math.max(1, replication - 1);
  const clusterId = execFileSync('java', ['-cp', CLASSPATH, 'kafka.tools.StorageTool', 'random-uuid'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  const readyTimeoutMs = options.readyTimeoutMs ?? 180_000;
  const brokers = ports.map((p) => `127.0.0.1:${p}`).join(',');

  const nodes = ids.map((id, i) => {
    const nodeDir = join(dir, `node-${id}`);
    mkdirSync(nodeDir, { recursive: true });
    const props = join(nodeDir, 'server.properties');
    const port = ports[i] as number;
    const overrides = Object.entries(options.properties ?? {}).map(([name, value]) => `${name}=${value}\n`).join('');
    writeFileSync(props, serverProperties(nodeDir, port, controllerPorts[i] as number, undefined, { nodeId: id, voters, replication, minInsync }) + overrides);
    writeFileSync(join(nodeDir, 'log4j.properties'), LOG4J);
    execFileSync('java', ['-cp', CLASSPATH, 'kafka.tools.StorageTool', 'format', '-t', clusterId, '-c', props], { stdio: 'ignore' });
    let child: ChildProcess | undefined;
    let pid = 0;
    return {
      id,
      port,
      address: `127.0.0.1:${port}`,
      dir: nodeDir,
      pid: () => pid,
      child: () => child,
      spawn(): void {
        child = java(['kafka.Kafka', props], nodeDir, options.detached ?? false);
        pid = child.pid ?? 0;
        writeFileSync(join(nodeDir, 'broker.pid'), String(pid));
        if (options.detached) child.unref();
        const mine = child;
        mine.on('exit', () => {
          if (child === mine) pid = 0;
        });
      },
      async kill(signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
        if (!pid || !alive(pid)) {
          pid = 0;
          return;
        }
        if (signal === 'SIGKILL') {
          process.kill(pid, 'SIGKILL');
          await waitForExit(pid, 10_000);
        } else await killPid(pid);
        pid = 0;
      },
    };
  });
  const node = (id: number): (typeof nodes)[number] => {
    const n = nodes.find((x) => x.id === id);
    if (!n) throw new Error(`no node ${id} in a cluster of ${count}`);
    return n;
  };
  const stopAll = async (): Promise<void> => {
    await Promise.all(nodes.map((n) => n.kill('SIGTERM')));
  };
  const startNode = async (id: number): Promise<void> => {
    const n = node(id);
    if (n.pid() && alive(n.pid())) return;
    n.spawn();
    try {
      // It serves requests itself, and the controller lists every node again.
      await waitUntilReady(n.address, readyTimeoutMs, n.child());
      await waitUntilReady(n.address, readyTimeoutMs, n.child(), count);
    } catch (error) {
      // The node that did not come up is not left running (the others are the caller's).
      await n.kill('SIGTERM');
      throw error;
    }
  };
  const startAll = async (): Promise<void> => {
    // The quorum needs a majority of voters: start them all at once.
    for (const n of nodes) if (!n.pid() || !alive(n.pid())) n.spawn();
    try {
      await Promise.all(nodes.map((n) => waitUntilReady(n.address, readyTimeoutMs, n.child(), count)));
    } catch (error) {
      // A cluster that did not come up is stopped whole: its JVMs have no owner otherwise.
      await stopAll();
      for (const n of nodes) rmSync(join(n.dir, 'broker.pid'), { force: true });
      throw error;
    }
  };
  await startAll();
  return {
    brokers,
    port: ports[0] as number,
    dir,
    nodes: nodes.map(({ id, port, address, dir: nodeDir, pid }) => ({ id, port, address, dir: nodeDir, pid })),
    start: startAll,
    stop: stopAll,
    restart: async () => {
      await stopAll();
      await startAll();
    },
    destroy: async () => {
      await stopAll();
      rmSync(dir, { recursive: true, force: true });
    },
    killNode: (id) => node(id).kill('SIGKILL'),
    stopNode: (id) => node(id).kill('SIGTERM'),
    startNode,
    restartNode: async (id) => {
      await node(id).kill('SIGTERM');
      await startNode(id);
    },
  };
}

/** Pids of every node of a cluster started detached in `dir` (their pid files). */
function clusterPids(dir: string): number[] {
  const pids: number[] = [];
  for (let id = 1; id <= 9; id++) {
    const file = join(resolve(dir), `node-${id}`, 'broker.pid');
    if (existsSync(file)) pids.push(Number(readFileSync(file, 'utf8')));
  }
  return pids;
}

/** Stop a cluster started detached in `dir`. */
export async function stopLocalKafkaCluster(dir: string): Promise<void> {
  await Promise.all(clusterPids(dir).map((pid) => killPid(pid)));
  for (let id = 1; id <= 9; id++) rmSync(join(resolve(dir), `node-${id}`, 'broker.pid'), { force: true });
}

/** SIGKILL every node of a cluster in `dir` at once (synchronous: for process exit handlers). */
export function killLocalKafkaClusterSync(dir: string): void {
  for (const pid of clusterPids(dir)) {
    try {
      if (pid) process.kill(pid, 'SIGKILL');
    } catch {
      // not running
    }
  }
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
