/**
 * A local cluster of N combined broker+controller nodes (KRaft quorum of N voters,
 * replication factor 3, min.insync.replicas 2, unclean leader election off), with
 * kill/stop/start of one node by id for the fault suite. `scripts/localKafka.ts start --nodes N`
 * runs one by hand.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CLASSPATH, LOG4J, ROOT, alive, fetchKafkaJars, java, killPid, portTaken, serverProperties, waitUntilReady, withLogs, type LocalKafka } from './kafkaProcess.js';
import { startOnFreePorts, type PortSource } from './ports.js';

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
  /** Where the picked ports come from (tests hand out a taken one); `freePorts` by default. */
  portSource?: PortSource;
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
  return startOnFreePorts(2 * count, (ports) => startCluster(dir, count, options, ports), portTaken, { source: options.portSource });
}

async function startCluster(dir: string, count: number, options: LocalKafkaClusterOptions, picked: number[]): Promise<LocalKafkaCluster> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const ids = Array.from({ length: count }, (_, i) => i + 1);
  const ports = picked.slice(0, count);
  const controllerPorts = picked.slice(count);
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
        await killPid(pid, signal === 'SIGKILL' ? 0 : undefined);
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
      await waitUntilReady(n.address, readyTimeoutMs, n.child(), n.dir);
      await waitUntilReady(n.address, readyTimeoutMs, n.child(), n.dir, count);
    } catch (error) {
      // The node that did not come up is not left running (the others are the caller's).
      await n.kill('SIGKILL');
      throw withLogs(error, [n.dir]);
    }
  };
  const startAll = async (): Promise<void> => {
    // The quorum needs a majority of voters: start them all at once.
    for (const n of nodes) if (!n.pid() || !alive(n.pid())) n.spawn();
    try {
      await Promise.all(nodes.map((n) => waitUntilReady(n.address, readyTimeoutMs, n.child(), n.dir, count)));
    } catch (error) {
      // A cluster that did not come up is stopped whole: its JVMs have no owner otherwise.
      await Promise.all(nodes.map((n) => n.kill('SIGKILL')));
      for (const n of nodes) rmSync(join(n.dir, 'broker.pid'), { force: true });
      throw withLogs(error, nodes.map((n) => n.dir));
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
