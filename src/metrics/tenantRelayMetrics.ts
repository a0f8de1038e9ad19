/**
 * Metrics and readiness of the tenant relay (src/tenants/). Labels stay bounded whatever
 * the number of tenants: totals, tenants per state, and the backlog of the few tenants
 * with the most rows waiting (`topTenants`, default 10), whose label set is replaced at
 * each sample.
 */
import { Registry, type Counter, type Gauge, type Histogram } from 'prom-client';
import type { TenantRelay, TenantState } from '../tenants/tenantRelay.js';
import { LATENCY_BUCKETS, registerMetrics, type MetricTable } from '../shared/metricDefinitions.js';
import { describeError } from '../shared/errors.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { addProcessMetrics } from './processMetrics.js';
import type { Readiness } from './readiness.js';
import { serveOnAddress, type MetricsServer } from './server.js';

export interface TenantRelayMetrics {
  tenants: Gauge<'state'>;
  publishedRows: Counter<string>;
  commitToAck: Histogram<string>;
  connections: Gauge<string>;
  connectionsMax: Gauge<string>;
  refused: Gauge<string>;
  backlog: Gauge<'tenant'>;
}

export const TENANT_RELAY_METRICS: MetricTable<TenantRelayMetrics> = {
  tenants: { type: 'gauge', name: 'outbox_relay_tenants', help: 'Tenants found by the rule, per state (idle, waiting, starting, serving, releasing, unavailable).', labelNames: ['state'] },
  publishedRows: { type: 'counter', name: 'outbox_relay_tenant_published_rows_total', help: 'Rows published, all tenants together.' },
  commitToAck: { type: 'histogram', name: 'outbox_relay_tenant_commit_to_ack_seconds', help: "From a row's created_at to Kafka's acknowledgement, all tenants together.", buckets: LATENCY_BUCKETS },
  connections: { type: 'gauge', name: 'outbox_relay_tenant_connections', help: 'Postgres connections the tenant relay may hold now (its own and those of the tenants it serves).' },
  connectionsMax: { type: 'gauge', name: 'outbox_relay_tenant_connections_max', help: 'The connection budget (maxDatabaseConnections).' },
  refused: { type: 'gauge', name: 'outbox_relay_tenant_refused', help: "Rows the rule's last evaluation found and passed over (see the log)." },
  backlog: { type: 'gauge', name: 'outbox_relay_tenant_backlog_rows', help: 'Rows waiting, for the tenants with the most (at most topTenants labels at a time; counted up to 100000).', labelNames: ['tenant'] },
};

const STATES: readonly TenantState[] = ['idle', 'waiting', 'starting', 'serving', 'releasing', 'unavailable'];

/** What {@link instrumentTenantRelay} returns: the registry, readiness, a sample on demand, close. */
export interface TenantRelayInstrumentation {
  readonly registry: Registry;
  /** Ready when the control connection is open and no tenant is unavailable; the check names them. */
  readiness(): Promise<Readiness>;
  /** Take one sample now (the timer also takes them). */
  sample(): Promise<void>;
  close(): Promise<void>;
}

/** Observe a tenant relay: its events, and a sample of the tenants every `sampleIntervalMs`. */
export function instrumentTenantRelay(
  relay: TenantRelay,
  options: { registry?: Registry; processMetrics?: boolean; sampleIntervalMs?: number; topTenants?: number; logger?: Logger } = {},
): TenantRelayInstrumentation {
  const registry = options.registry ?? new Registry();
  if (options.processMetrics ?? true) addProcessMetrics(registry);
  const m = registerMetrics(registry, TENANT_RELAY_METRICS);
  const logger = (options.logger ?? silentLogger()).child({ component: 'metrics' });
  const top = options.topTenants ?? 10;
  m.connectionsMax.set(relay.options.maxDatabaseConnections);
  const onBatch = (b: { count: number; createdAtMs: number[]; ackedAtMs: number }): void => {
    m.publishedRows.inc(b.count);
    for (const c of b.createdAtMs) m.commitToAck.observe(Math.max(0, b.ackedAtMs - c) / 1000);
  };
  relay.on('batch', onBatch);
  let shown = new Set<string>();
  let sampling: Promise<void> | undefined;
  const sample = (): Promise<void> =>
    (sampling ??= (async () => {
      const counts = Object.fromEntries(STATES.map((s) => [s, 0])) as Record<TenantState, number>;
      for (const t of relay.tenants()) counts[t.state]++;
      for (const s of STATES) m.tenants.set({ state: s }, counts[s]);
      m.connections.set(relay.connectionsInUse);
      m.refused.set(relay.refusedTenants);
      const backlogs = [...(await relay.backlogs()).entries()].filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]).slice(0, top);
      const now = new Set(backlogs.map(([t]) => t));
      for (const t of shown) if (!now.has(t)) m.backlog.remove({ tenant: t });
      for (const [t, n] of backlogs) m.backlog.set({ tenant: t }, n);
      shown = now;
    })()
      .catch((error: unknown) => logger.warn({ err: describeError(error) }, 'tenant metrics: sample failed'))
      .finally(() => (sampling = undefined)));
  const timer = setInterval(() => void sample(), options.sampleIntervalMs ?? 5_000);
  timer.unref();
  let closed = false;
  return {
    registry,
    sample,
    async readiness() {
      const unavailable = relay.tenants().filter((t) => t.state === 'unavailable');
      const names = unavailable.slice(0, 20).map((t) => t.name).join(', ') + (unavailable.length > 20 ? `, and ${unavailable.length - 20} more` : '');
      const checks = {
        control: { ok: relay.controlConnected, detail: relay.controlConnected ? 'the control connection is open' : 'the control connection is down (reconnecting)' },
        tenants: { ok: unavailable.length === 0, detail: unavailable.length === 0 ? `${relay.tenants().length} tenants, none unavailable` : `not publishing: ${names}` },
      };
      return { ready: checks.control.ok && checks.tenants.ok, checks };
    },
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(timer);
      relay.off('batch', onBatch);
      await sampling;
    },
  };
}

/** What {@link serveTenantRelayMetrics} returns. */
export interface TenantRelayMetricsService {
  readonly server: MetricsServer;
  readonly instrumentation: TenantRelayInstrumentation;
  close(): Promise<void>;
}

/** /metrics, /healthz and /readyz of a tenant relay on `address` (`host:port`, or `off`: undefined). */
export async function serveTenantRelayMetrics(
  relay: TenantRelay,
  options: { address: string; sampleIntervalMs?: number; logger?: Logger },
): Promise<TenantRelayMetricsService | undefined> {
  return serveOnAddress(options.address, options.logger, () => {
    const instrumentation = instrumentTenantRelay(relay, { sampleIntervalMs: options.sampleIntervalMs, logger: options.logger });
    return { instrumentation, registry: instrumentation.registry, readiness: () => instrumentation.readiness(), close: () => instrumentation.close() };
  });
}
