import { createRelay } from '../relay/relay.js';
import { RELAY_SETTINGS, type RelayOptions } from '../relay/options.js';
import { logLevel } from '../shared/commonSettings.js';
import { METRICS_SETTINGS, metricsAddress, metricsSampleIntervalMs } from '../metrics/options.js';
import type { Logger } from '../shared/logger.js';
import type { Kafka } from 'kafkajs';
import { optionValue } from '../shared/settings.js';
import { describeKafkaSecurity, KAFKA_SECURITY_SETTINGS } from '../shared/kafkaSecurity.js';
import { serveRelayMetrics } from '../metrics/server.js';
import { createRelayGroup, type RelayGroupOptions } from '../relay/relayGroup.js';
import { serveRelayGroupMetrics } from '../metrics/relayGroupMetrics.js';

/** Process exit codes of `outbox-relay` commands. */
export const EXIT = {
  /** Finished, or stopped cleanly after a signal. */
  ok: 0,
  /** A runtime failure: a server unreachable at start, schema missing, a bug. */
  failure: 1,
  /** Invalid settings or usage; nothing was touched. */
  usage: 2,
  /** Stopped hard: a second signal, or the shutdown timeout, cut in-flight batches short (they are published again later). */
  forced: 3,
} as const;

/** Every setting of `outbox-relay run`, in the order the CLI and docs/configuration.md list them. */
export const RUN_SETTINGS = [...RELAY_SETTINGS, ...KAFKA_SECURITY_SETTINGS, ...METRICS_SETTINGS, logLevel] as const;

/** Options of {@link runRelay}: the relay's, plus the metrics server and signal handling. */
export interface RunRelayOptions extends RelayOptions {
  logger: Logger;
  /** `host:port` of /metrics, /healthz and /readyz, or `off` (default 127.0.0.1:9464). */
  metricsAddress?: string;
  /** How often the backlog gauges are sampled, in ms. */
  metricsSampleIntervalMs?: number;
  /** Install SIGTERM/SIGINT handlers (default true): first soft stop, second hard stop. */
  handleSignals?: boolean;
  /** Resolves the returned promise's stop early when aborted (for embedding and tests). */
  signal?: AbortSignal;
}

/**
 * `outbox-relay run`: start a relay and keep it running until SIGTERM or SIGINT.
 *
 * The first signal stops claiming and lets the batches in flight finish; a second one,
 * or the shutdown timeout, abandons them (their rows are published again later).
 *
 * @returns the exit code: {@link EXIT}.ok after a soft stop, EXIT.forced after a hard one
 */
export async function runRelay(options: RunRelayOptions): Promise<number> {
  // Every option, Kafka security included, is checked here before anything connects.
  const relay = createRelay(options);
  const address = optionValue(metricsAddress, options.metricsAddress);
  const sampleIntervalMs = optionValue(metricsSampleIntervalMs, options.metricsSampleIntervalMs);
  return runUntilSignalled(relay, options, async () => {
    options.logger.info({ kafka: describeKafkaSecurity(options) }, 'kafka connection security');
    return serveRelayMetrics(relay, { address, sampleIntervalMs, kafka: relay.kafka as Kafka, logger: options.logger });
  });
}

/** Options of {@link runRelayGroup}: the group's, plus the metrics server and signal handling. */
export interface RunRelayGroupOptions extends RelayGroupOptions, Omit<RunRelayOptions, keyof RelayOptions> {
  logger: Logger;
}

/**
 * `outbox-relay run` over several outboxes (`--outboxes-file` or OUTBOX_OUTBOXES): one
 * relay per outbox in this process, until SIGTERM or SIGINT, as {@link runRelay}. An
 * outbox that cannot start is retried in the background; the others run meanwhile.
 *
 * @returns the exit code: {@link EXIT}.ok after a soft stop, EXIT.forced after a hard one
 */
export async function runRelayGroup(options: RunRelayGroupOptions): Promise<number> {
  const group = createRelayGroup(options);
  const address = optionValue(metricsAddress, options.metricsAddress);
  const sampleIntervalMs = optionValue(metricsSampleIntervalMs, options.metricsSampleIntervalMs);
  // Instrumented before start: /readyz and outbox_relay_outbox_up see every outbox from its first attempt.
  const metrics = await serveRelayGroupMetrics(group, { address, sampleIntervalMs, logger: options.logger });
  try {
    return await runUntilSignalled(group, options, async () => {
      options.logger.info({ kafka: describeKafkaSecurity(options), outboxes: group.outboxes.length }, 'kafka connection security');
      return undefined;
    });
  } finally {
    await metrics?.close();
  }
}

/** A relay, a relay group or a tenant relay, as the signal handling sees it. */
export interface Stoppable {
  start(): Promise<void>;
  stop(): Promise<{ hard: boolean }>;
  abort(): Promise<{ hard: boolean }>;
  once(event: 'stopped', listener: (e: { hard: boolean }) => void): unknown;
}

/**
 * Start `target` and keep it running until SIGTERM/SIGINT/SIGHUP (first: soft stop; second:
 * hard) or `options.signal`; `afterStart` starts what serves it (metrics) and is closed at
 * the end. Returns the exit code.
 */
export async function runUntilSignalled(
  target: Stoppable,
  options: Pick<RunRelayOptions, 'logger' | 'handleSignals' | 'signal'>,
  afterStart: () => Promise<{ close(): Promise<void> } | undefined>,
): Promise<number> {
  const logger = options.logger;
  // Handlers go in before start(): a signal during start-up (while Postgres is slow to
  // answer, say) must stop the relay cleanly and at once, not wait for the connect timeout
  // nor kill the process with its leases held. stop() and abort() cut a start short.
  let signals = 0;
  const onSignal = (name: NodeJS.Signals): void => {
    signals++;
    if (signals === 1) {
      logger.info({ signal: name }, 'stopping: finishing batches in flight (send the signal again to stop now)');
      void target.stop();
    } else {
      logger.warn({ signal: name }, 'second signal: stopping now');
      void target.abort();
    }
  };
  const handled: NodeJS.Signals[] = options.handleSignals ?? true ? ['SIGTERM', 'SIGINT', 'SIGHUP'] : [];
  for (const s of handled) process.on(s, onSignal);
  let metrics: { close(): Promise<void> } | undefined;
  // Listened to before start(): a stop during start-up emits it before start() returns.
  const stopped = new Promise<{ hard: boolean }>((resolve) => target.once('stopped', resolve));
  const onAbort = (): void => void target.stop();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    if (options.signal?.aborted) void target.stop();
    try {
      await target.start();
    } catch (error) {
      // Stopped while starting: that is the signal's clean stop, not a failure to start.
      if (signals > 0 || options.signal?.aborted) return (await stopped).hard ? EXIT.forced : EXIT.ok;
      throw error;
    }
    if (signals === 0 && !options.signal?.aborted) {
      try {
        metrics = await afterStart();
      } catch (error) {
        await target.stop();
        throw error;
      }
    }
    const outcome = await stopped;
    return outcome.hard ? EXIT.forced : EXIT.ok;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
    for (const s of handled) process.off(s, onSignal);
    await metrics?.close();
  }
}
