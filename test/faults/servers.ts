/**
 * The servers of the fault suite and of its standalone reproductions: a Postgres instance
 * and a Kafka broker of their own (never the shared ones, since the suite restarts them),
 * for the pooler profiles a PgBouncer of their own in front of that Postgres, and a way
 * out that stops and deletes everything started, whatever the way: a normal return, an
 * exception, process exit, SIGINT, SIGTERM or SIGHUP.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { killLocalKafkaClusterSync, startLocalKafka, startLocalKafkaCluster, type LocalKafka, type LocalKafkaCluster } from '../../scripts/localKafka.js';
import { destroyLocalPostgresSync, startLocalPostgres, type LocalPostgres, type LocalPostgresOptions } from '../../scripts/localPostgres.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { ROOT } from './snapshot.js';

export interface Servers {
  postgres: LocalPostgres;
  /** A single broker, or a cluster (then `cluster` is the same object, with its nodes). */
  kafka: LocalKafka;
  cluster?: LocalKafkaCluster;
  /** The pooler profiles' PgBouncer in front of `postgres` (pool mode transaction). */
  pgbouncer?: PgBouncer;
}

/** Synchronous clean-ups, run on process exit and on a fatal signal. */
const cleanups = new Set<() => void>();
let installed = false;

/** Run `fn` (synchronous) if the process exits or is signalled before `remove()`. */
export function onEmergency(fn: () => void): { remove(): void } {
  if (!installed) {
    installed = true;
    const runAll = (): void => {
      for (const f of [...cleanups].reverse()) {
        try {
          f();
        } catch {
          // best effort on the way out
        }
      }
      cleanups.clear();
    };
    process.on('exit', runAll);
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
      process.on(signal, () => {
        process.stderr.write(`faults: ${signal}: cleaning up\n`);
        runAll();
        process.exit(1);
      });
    }
  }
  cleanups.add(fn);
  return { remove: () => void cleanups.delete(fn) };
}

/** A Postgres instance of our own, deleted on the way out even if nobody calls destroy(). */
export async function startOwnPostgres(options: LocalPostgresOptions = {}): Promise<LocalPostgres> {
  const postgres = await startLocalPostgres(options);
  const guard = onEmergency(() => destroyLocalPostgresSync(postgres.dir));
  return {
    ...postgres, // a plain object of closures
    destroy: async (): Promise<void> => {
      await postgres.destroy();
      guard.remove();
    },
  };
}

/** A Kafka broker of our own, killed and deleted on the way out. */
export async function startOwnKafka(): Promise<LocalKafka> {
  const kafka = await startLocalKafka({ dir: join(ROOT, '.cache/kafka/run', `faults-${process.pid}`) });
  const guard = onEmergency(() => {
    try {
      const pid = Number(readFileSync(join(kafka.dir, 'broker.pid'), 'utf8'));
      if (pid) process.kill(pid, 'SIGKILL');
    } catch {
      // not running
    }
    rmSync(kafka.dir, { recursive: true, force: true });
  });
  return {
    ...kafka, // a plain object of closures
    destroy: async (): Promise<void> => {
      await kafka.destroy();
      guard.remove();
    },
  };
}

/** A Kafka cluster of our own (`nodes` combined broker+controller nodes), killed and deleted on the way out. */
export async function startOwnKafkaCluster(nodes: number): Promise<LocalKafkaCluster> {
  const dir = join(ROOT, '.cache/kafka/run', `faults-cluster-${process.pid}`);
  // FAULTS_KEEP_KAFKA=1 leaves the nodes' data dirs behind (stopped), so that the partition
  // logs can be read afterwards with Kafka's DumpLogSegments: a wire duplicate's two copies
  // carry the producer id, epoch and sequence that say which transaction wrote each.
  const keep = process.env.FAULTS_KEEP_KAFKA === '1';
  const guard = onEmergency(() => {
    killLocalKafkaClusterSync(dir);
    if (!keep) rmSync(dir, { recursive: true, force: true });
  });
  let cluster: LocalKafkaCluster;
  try {
    // The coordinator looks for transactions past their timeout every 500 ms instead of
    // Kafka's 10 s, so that a stalled relay's transaction (exactly-once profiles) is
    // aborted soon after its timeout and the stall can stay short.
    cluster = await startLocalKafkaCluster({ dir, nodes, properties: { 'transaction.abort.timed.out.transaction.cleanup.interval.ms': '500' } });
  } catch (error) {
    killLocalKafkaClusterSync(dir);
    throw error;
  }
  return {
    ...cluster, // a plain object of closures
    destroy: async (): Promise<void> => {
      if (keep) {
        await cluster.stop();
        process.stderr.write(`faults: FAULTS_KEEP_KAFKA=1: cluster data kept in ${dir}\n`);
      } else {
        await cluster.destroy();
      }
      guard.remove();
    },
  };
}

/** A PgBouncer of our own in front of `postgres` (its database `postgres`), killed and deleted on the way out. */
export async function startOwnPgBouncer(postgres: LocalPostgres, mode: 'transaction'): Promise<PgBouncer> {
  // A directory of our own naming, deleted here: nobody else's clean-up of the helper's
  // /tmp/outbox-pgbouncer-* may take it away in the middle of a run.
  const dir = mkdtempSync('/tmp/faults-pgbouncer-');
  const guard = onEmergency(() => {
    try {
      const pid = Number(readFileSync(join(dir, 'pgbouncer.pid'), 'utf8'));
      if (pid) process.kill(pid, 'SIGKILL');
    } catch {
      // not running
    }
    rmSync(dir, { recursive: true, force: true });
  });
  let bouncer: PgBouncer;
  try {
    bouncer = await startPgBouncer({ mode, dir, pgPort: postgres.port, database: 'postgres' });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    guard.remove();
    throw error;
  }
  return {
    ...bouncer, // a plain object of closures
    stop: async (): Promise<void> => {
      await bouncer.stop();
      rmSync(dir, { recursive: true, force: true });
      guard.remove();
    },
  };
}

/** Both servers, started at once: a single broker, or a cluster of `brokers` nodes; and
 *  with `pooler`, a PgBouncer in front of the Postgres once it is up. */
export async function startServers(brokers = 1, pooler?: 'transaction'): Promise<Servers> {
  let cluster: LocalKafkaCluster | undefined;
  const [postgres, kafka] = await Promise.allSettled([
    startOwnPostgres(),
    brokers > 1 ? startOwnKafkaCluster(brokers).then((c) => (cluster = c)) : startOwnKafka(),
  ]);
  let pgbouncer: PromiseSettledResult<PgBouncer | undefined> = { status: 'fulfilled', value: undefined };
  if (postgres.status === 'fulfilled' && pooler) {
    [pgbouncer] = await Promise.allSettled([startOwnPgBouncer(postgres.value, pooler)]);
  }
  if (postgres.status === 'fulfilled' && kafka.status === 'fulfilled' && pgbouncer.status === 'fulfilled') {
    return { postgres: postgres.value, kafka: kafka.value, ...(cluster ? { cluster } : {}), ...(pgbouncer.value ? { pgbouncer: pgbouncer.value } : {}) };
  }
  if (postgres.status === 'fulfilled') await postgres.value.destroy().catch(() => undefined);
  if (kafka.status === 'fulfilled') await kafka.value.destroy().catch(() => undefined);
  const failed = [postgres, kafka, pgbouncer].find((r): r is PromiseRejectedResult => r.status === 'rejected');
  throw failed?.reason as Error;
}

export async function stopServers(servers: Servers | undefined): Promise<void> {
  if (!servers) return;
  await servers.pgbouncer?.stop().catch(() => undefined);
  await servers.kafka.destroy().catch(() => undefined);
  await servers.postgres.destroy().catch(() => undefined);
}
