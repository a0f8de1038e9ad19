import { integer, type Setting } from '../shared/settings.js';

/** Where the metrics and health server listens; `off` when disabled. */
export type MetricsAddress = { host: string; port: number } | 'off';

const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252})?)$/;

/**
 * Parse `host:port` (IPv6 in brackets: `[::]:9464`) or `off`.
 * @returns the address, or a problem description
 */
export function parseMetricsAddress(raw: string): { value: MetricsAddress } | { problem: string } {
  const text = raw.trim();
  if (text.toLowerCase() === 'off') return { value: 'off' };
  const m = /^(.*):(\d{1,5})$/.exec(text);
  const port = m ? Number(m[2]) : -1;
  const host = m?.[1] ?? '';
  if (!m || !HOST.test(host) || port < 0 || port > 65535) {
    return { problem: `${JSON.stringify(raw)} is not host:port (for example 127.0.0.1:9464 or 0.0.0.0:9464) or off` };
  }
  return { value: { host: host.replace(/^\[(.*)\]$/, '$1'), port } };
}

/** `host:port` text of an address, IPv6 hosts in brackets. */
function formatMetricsAddress(address: MetricsAddress): string {
  if (address === 'off') return 'off';
  return `${address.host.includes(':') ? `[${address.host}]` : address.host}:${address.port}`;
}

/** `--metrics-address`: where the metrics and health server listens, or `off`. */
export const metricsAddress: Setting<string> = {
  option: 'metricsAddress',
  flag: '--metrics-address',
  env: 'OUTBOX_METRICS_ADDRESS',
  description:
    'Address of the /metrics, /healthz and /readyz HTTP server, host:port (0.0.0.0:9464 to be scraped from other hosts), or off.',
  defaultValue: '127.0.0.1:9464',
  parse(raw) {
    const parsed = parseMetricsAddress(raw);
    return 'problem' in parsed ? parsed : { value: formatMetricsAddress(parsed.value) };
  },
  check(value) {
    const parsed = parseMetricsAddress(value);
    return 'problem' in parsed ? parsed.problem : undefined;
  },
};

/** `--metrics-sample-interval-ms`: how often the backlog sampler runs. */
export const metricsSampleIntervalMs = integer({
  option: 'metricsSampleIntervalMs',
  flag: '--metrics-sample-interval-ms',
  env: 'OUTBOX_METRICS_SAMPLE_INTERVAL_MS',
  description: 'How often the backlog, the oldest pending row and the ingress rate are sampled from Postgres (milliseconds).',
  defaultValue: 5_000,
  min: 100,
  max: 600_000,
});

/** The metrics settings, in the order the CLI and docs/configuration.md list them. */
export const METRICS_SETTINGS = [metricsAddress, metricsSampleIntervalMs] as const;
