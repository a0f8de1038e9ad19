/**
 * Metrics and readiness of a relay group (src/relay/relayGroup.ts): one registry, every
 * relay metric labelled with its outbox, `outbox_relay_outbox_up{outbox}`, and a /readyz
 * whose checks are named `<outbox>.<check>` (database, claim, schema, kafka, shards of each
 * running outbox; `<outbox>.running` of one that cannot start).
 */
import { Registry } from 'prom-client';
import type { Kafka } from 'kafkajs';
import type { Relay } from '../relay/relay.js';
import type { RelayGroup } from '../relay/relayGroup.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { addProcessMetrics } from './processMetrics.js';
import { instrumentRelay, relayMetrics, type RelayInstrumentation } from './relayMetrics.js';
import { relayReadiness, type Readiness, type ReadinessCheck, type RelayReadiness } from './readiness.js';
import { serveOnAddress, type MetricsServer } from './server.js';
import { errorLabel } from './errorLabel.js';

/** What {@link instrumentRelayGroup} returns. */
export interface RelayGroupInstrumentation {
  readonly registry: Registry;
  /** Per outbox: every check of its relay, or why it does not run. Ready when all pass. */
  readiness(): Promise<Readiness>;
  /** Unsubscribe, stop the samplers, close the probes. Idempotent. */
  close(): Promise<void>;
}

/**
 * Observe a relay group: instrument each outbox's relay when it starts (and again after a
 * restart), under its name. Call before `group.start()` to see every outbox from its first
 * attempt.
 */
export function instrumentRelayGroup(
  group: RelayGroup,
  options: { registry?: Registry; sampleIntervalMs?: number; processMetrics?: boolean; kafka?: Kafka; logger?: Logger } = {},
): RelayGroupInstrumentation {
  const registry = options.registry ?? new Registry();
  if (options.processMetrics ?? true) addProcessMetrics(registry);
  const up = relayMetrics(registry).outboxUp;
  const logger = options.logger ?? silentLogger();
  const running = new Map<string, { relay: Relay; instrumentation: RelayInstrumentation; readiness: RelayReadiness }>();
  const closing: Promise<void>[] = [];
  const release = (name: string): void => {
    const r = running.get(name);
    if (!r) return;
    running.delete(name);
    closing.push(r.readiness.close().then(() => r.instrumentation.close()));
  };
  for (const o of group.outboxes) up.set({ outbox: o.name }, o.state === 'running' ? 1 : 0);
  const lastError = new Map<string, Error>();
  const onOutbox = (e: { name: string; state: string; relay: Relay | undefined; error?: Error | undefined }): void => {
    if (e.error) lastError.set(e.name, e.error);
    up.set({ outbox: e.name }, e.state === 'running' ? 1 : 0);
    if (e.state === 'running' && e.relay && running.get(e.name)?.relay !== e.relay) {
      release(e.name);
      const instrumentation = instrumentRelay(e.relay, { registry, outbox: e.name, processMetrics: false, sampleIntervalMs: options.sampleIntervalMs, logger });
      const readiness = relayReadiness(e.relay, instrumentation, { kafka: options.kafka ?? group.kafka, logger });
      running.set(e.name, { relay: e.relay, instrumentation, readiness });
    }
  };
  group.on('outbox', onOutbox);
  // Outboxes already running when instrumented (instrumented after start).
  for (const o of group.outboxes) if (o.state === 'running' && o.relay) onOutbox({ name: o.name, state: o.state, relay: o.relay });
  let closed = false;
  return {
    registry,
    async readiness() {
      const checks: Record<string, ReadinessCheck> = {};
      await Promise.all(
        group.outboxes.map(async (o) => {
          const r = running.get(o.name);
          if (o.state !== 'running' || !r) {
            checks[`${o.name}.running`] = { ok: false, detail: o.state === 'unavailable' ? `unavailable, retrying (${o.failedStarts} failed starts): ${errorLabel(lastError.get(o.name))}` : o.state };
            return;
          }
          const result = await r.readiness.check();
          for (const [check, value] of Object.entries(result.checks)) checks[`${o.name}.${check}`] = value;
        }),
      );
      const ordered = Object.fromEntries(Object.entries(checks).sort(([a], [b]) => a.localeCompare(b)));
      return { ready: Object.values(ordered).every((c) => c.ok), checks: ordered };
    },
    async close() {
      if (closed) return;
      closed = true;
      group.off('outbox', onOutbox);
      for (const name of [...running.keys()]) release(name);
      await Promise.all(closing);
    },
  };
}

/** What {@link serveRelayGroupMetrics} started; `close()` stops all of it. */
export interface RelayGroupMetricsService {
  readonly server: MetricsServer;
  readonly instrumentation: RelayGroupInstrumentation;
  close(): Promise<void>;
}

/**
 * `outbox-relay run` with several outboxes: instrument the group and serve /metrics,
 * /healthz and /readyz on `address` (`off`: nothing, undefined).
 */
export async function serveRelayGroupMetrics(
  group: RelayGroup,
  options: { address: string; sampleIntervalMs?: number; kafka?: Kafka; logger?: Logger },
): Promise<RelayGroupMetricsService | undefined> {
  return serveOnAddress(options.address, options.logger, () => {
    const instrumentation = instrumentRelayGroup(group, { sampleIntervalMs: options.sampleIntervalMs, kafka: options.kafka, logger: options.logger });
    return { instrumentation, registry: instrumentation.registry, readiness: () => instrumentation.readiness(), close: () => instrumentation.close() };
  });
}
