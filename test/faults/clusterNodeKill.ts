/**
 * The fault suite's SIGKILLs of Kafka cluster nodes (broker kills and leader kills), for
 * inject.ts: the node is found, killed, started again, and the cluster waited for until
 * every partition of the run's topic is fully in sync.
 */
import '../../src/shared/kafkajsIdleFix.js';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { waitFor } from '../helpers/wait.js';
import type { Fault } from './schedule.js';
import type { Servers } from './servers.js';

/** One SIGKILL of a cluster node, for the report. */
export interface BrokerKill {
  node: number;
  /** The partition it led when killed (leader kills). */
  ledPartition?: number;
  /** Until another node led that partition (leader kills), ms. */
  failoverMs?: number;
  /** Until the node was back and every partition of the topic in sync again, ms. */
  recoveredMs: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export class ClusterNodeKiller {
  constructor(private readonly t: { servers: Servers; log(line: string): void; topic?: string }) {}

  /**
   * SIGKILL a cluster node (a given one, or the one leading a partition of the run's topic
   * now, as the cluster's metadata says), start it again after `downMs`, and wait until it
   * is back and every partition of the topic has its full set of in-sync replicas, so
   * that the next kill never takes a second replica away. Returns the kill to count: only
   * when a live node was killed and, for a leader kill, when it was the leader and another
   * node took over.
   */
  async kill(f: Extract<Fault, { kind: 'broker-kill' | 'leader-kill' }>): Promise<BrokerKill | undefined> {
    const { log, servers } = this.t;
    const cluster = servers.cluster;
    if (!cluster) throw new Error(`${f.kind} needs a Kafka cluster, and this run has a single broker`);
    const admin = await this.admin();
    let node: number;
    let ledPartition: number | undefined;
    if (f.kind === 'leader-kill') {
      const leader = await this.leaderOf(admin, f.partition);
      if (leader === undefined) {
        log(`FAULT leader of partition ${f.partition}: no leader in the metadata; not counted`);
        return undefined;
      }
      node = leader;
      ledPartition = f.partition;
    } else node = f.node;
    const target = cluster.nodes.find((n) => n.id === node);
    const pid = target?.pid() ?? 0;
    log(`FAULT Kafka node ${node}${ledPartition === undefined ? '' : ` (leader of partition ${ledPartition})`}: SIGKILL (restart in ${f.downMs} ms)`);
    const t0 = Date.now();
    await cluster.killNode(node);
    const killed = pid !== 0 && !processAlive(pid);
    let failoverMs: number | undefined;
    let tookOver = true;
    if (ledPartition !== undefined) {
      const p = ledPartition;
      tookOver = await waitFor(`another leader for partition ${p}`, async () => {
        const l = await this.leaderOf(admin, p).catch(() => undefined);
        return l !== undefined && l !== node && l >= 0;
      }, { timeoutMs: 60_000, intervalMs: 100 }).then(() => true, () => false);
      failoverMs = Date.now() - t0;
      log(tookOver ? `partition ${p}: new leader after ${failoverMs} ms` : `partition ${p}: no new leader within 60 s`);
    }
    await sleep(Math.max(0, f.downMs - (Date.now() - t0)));
    await cluster.startNode(node);
    await waitFor('every partition fully in sync', () => this.allInSync(admin), { timeoutMs: 120_000, intervalMs: 250 }).catch(() => log('partitions not all in sync within 120 s'));
    const recoveredMs = Date.now() - t0;
    log(`Kafka node ${node} back, partitions in sync, ${recoveredMs} ms after the kill`);
    if (killed && tookOver) return { node, ...(ledPartition === undefined ? {} : { ledPartition, failoverMs }), recoveredMs };
    log(`Kafka node ${node}: ${killed ? 'no leader took over' : 'was not running'}; not counted`);
    return undefined;
  }

  private adminClient: Admin | undefined;

  private async admin(): Promise<Admin> {
    if (!this.adminClient) {
      const brokers = this.t.servers.kafka.brokers.split(',');
      this.adminClient = new Kafka({ clientId: 'faults-injector', brokers, logLevel: logLevel.NOTHING, retry: { retries: 3 } }).admin();
      await this.adminClient.connect();
    }
    return this.adminClient;
  }

  /** Close the admin client of leader look-ups. */
  async close(): Promise<void> {
    await this.adminClient?.disconnect().catch(() => undefined);
    this.adminClient = undefined;
  }

  private async leaderOf(admin: Admin, partition: number): Promise<number | undefined> {
    if (!this.t.topic) throw new Error('leader kills need the run topic');
    const md = await admin.fetchTopicMetadata({ topics: [this.t.topic] });
    const p = md.topics[0]?.partitions.find((x) => x.partitionId === partition);
    return p && p.leader >= 0 ? p.leader : undefined;
  }

  private async allInSync(admin: Admin): Promise<boolean> {
    if (!this.t.topic) return true;
    try {
      const md = await admin.fetchTopicMetadata({ topics: [this.t.topic] });
      const parts = md.topics[0]?.partitions ?? [];
      return parts.length > 0 && parts.every((p) => p.leader >= 0 && p.isr.length === p.replicas.length);
    } catch {
      return false;
    }
  }
}
