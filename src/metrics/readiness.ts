/**
 * The relay's readiness, for /readyz: the database answers `SELECT 1`, a Kafka metadata
 * request succeeds with the relay's own client (answer cached a few seconds), and the
 * relay runs (owning shards or waiting for them). A failed check reports an error label
 * (./errorLabel.ts), never a message or a connection string.
 */
import type { Admin, Kafka } from 'kafkajs';
import { createKafka } from '../shared/kafka.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { errorLabel } from './errorLabel.js';
import { withDeadline } from './promises.js';
import type { RelayInstrumentation } from './relayMetrics.js';
import type { RelayStatusSource } from './relayStatusSource.js';

/** One check of /readyz. */
export interface ReadinessCheck {
  ok: boolean;
  detail: string;
}

/** The answer of /readyz: ready when every check is ok. */
export interface Readiness {
  ready: boolean;
  checks: Record<string, ReadinessCheck>;
}

/** Options of {@link relayReadiness}. */
export interface RelayReadinessOptions {
  /** Kafka client to probe with (default: relay.options.kafka, else one from its brokers and TLS/SASL settings). */
  kafka?: Kafka;
  /** Per check, in ms (default 2000). */
  timeoutMs?: number;
  /** Reuse a Kafka probe's answer this long, in ms (default 5000). */
  kafkaCacheMs?: number;
  logger?: Logger;
}

/** The relay's /readyz: database reachable, Kafka reachable, running (owning shards or waiting for them). */
export interface RelayReadiness {
  check(): Promise<Readiness>;
  close(): Promise<void>;
}

/**
 * The relay's readiness checks: database, Kafka, shards. `close()` disconnects the Kafka
 * probe's admin client.
 */
export function relayReadiness(
  relay: RelayStatusSource,
  instrumentation: Pick<RelayInstrumentation, 'pingDatabase' | 'stopped'>,
  options: RelayReadinessOptions = {},
): RelayReadiness {
  const timeoutMs = options.timeoutMs ?? 2_000;
  const cacheMs = options.kafkaCacheMs ?? 5_000;
  const logger = options.logger ?? silentLogger();
  const kafka =
    options.kafka ??
    relay.options.kafka ??
    createKafka({ brokers: relay.options.kafkaBrokers, clientId: `${relay.options.clientId}-readiness`, logger, ...relay.options.kafkaSecurity });
  let admin: Admin | undefined;
  let cached: { at: number; result: ReadinessCheck } | undefined;

  const probeKafka = async (): Promise<ReadinessCheck> => {
    if (cached && Date.now() - cached.at < cacheMs) return cached.result;
    let result: ReadinessCheck;
    try {
      admin ??= kafka.admin({ retry: { retries: 0 } });
      const a = admin;
      const cluster = await withDeadline(
        (async () => {
          await a.connect();
          return a.describeCluster();
        })(),
        timeoutMs,
        'Kafka metadata request',
      );
      result = { ok: true, detail: `${cluster.brokers.length} broker(s)` };
    } catch (error) {
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
      result = { ok: false, detail: errorLabel(error) };
    }
    cached = { at: Date.now(), result };
    return result;
  };

  const probeDatabase = async (): Promise<ReadinessCheck> => {
    try {
      await instrumentation.pingDatabase(timeoutMs);
      return { ok: true, detail: 'reachable' };
    } catch (error) {
      return { ok: false, detail: errorLabel(error) };
    }
  };

  return {
    async check() {
      const [database, kafkaCheck] = await Promise.all([probeDatabase(), probeKafka()]);
      const count = relay.ownedShards.length;
      const shards: ReadinessCheck = instrumentation.stopped
        ? { ok: false, detail: 'relay stopped' }
        : { ok: true, detail: count > 0 ? `owns ${count} shard(s)` : 'waiting for shards' };
      const checks = { database, kafka: kafkaCheck, shards };
      return { ready: database.ok && kafkaCheck.ok && shards.ok, checks };
    },
    async close() {
      await admin?.disconnect().catch(() => undefined);
      admin = undefined;
    },
  };
}
