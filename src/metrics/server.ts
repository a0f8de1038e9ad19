/**
 * A small HTTP server for Prometheus and for orchestrators:
 *
 *   GET /metrics  the registry in Prometheus text format
 *   GET /healthz  200 while the process serves requests (liveness)
 *   GET /readyz   200 when every readiness check passes, else 503; JSON body either way
 *
 * It serves nothing else and never echoes request data. Bind it where it is configured
 * (`--metrics-address`): 127.0.0.1 by default, 0.0.0.0 in a container that is scraped.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import type { Kafka } from 'kafkajs';
import { ConfigError, describeError } from '../shared/errors.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { parseMetricsAddress } from './options.js';
import { relayReadiness, type Readiness } from './readiness.js';
import { instrumentRelay, type RelayInstrumentation } from './relayMetrics.js';
import type { RelayStatusSource } from './relayStatusSource.js';
import { listenOn } from '../shared/listen.js';

/** Options of {@link startMetricsServer}. */
export interface MetricsServerOptions {
  host: string;
  /** 0 picks a free port (tests). */
  port: number;
  registry: Registry;
  /** Readiness of /readyz; without it, /readyz answers like /healthz. */
  readiness?: () => Promise<Readiness>;
  logger?: Logger;
}

/** A listening metrics server. */
export interface MetricsServer {
  /** The address bound, with the real port. */
  readonly host: string;
  readonly port: number;
  /** `http://host:port`. */
  readonly url: string;
  /** Stop listening and close open connections. Idempotent. */
  close(): Promise<void>;
}

/** Serve /metrics, /healthz and /readyz on `host:port`; resolves once it listens. */
export async function startMetricsServer(options: MetricsServerOptions): Promise<MetricsServer> {
  const logger = (options.logger ?? silentLogger()).child({ component: 'metrics-server' });
  const send = (res: ServerResponse, status: number, type: string, body: string): void => {
    res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
    res.end(body);
  };
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
      return;
    }
    if (path === '/metrics') {
      send(res, 200, options.registry.contentType, await options.registry.metrics());
    } else if (path === '/healthz') {
      send(res, 200, 'text/plain; charset=utf-8', 'ok\n');
    } else if (path === '/readyz') {
      const readiness = options.readiness ? await options.readiness() : { ready: true, checks: {} };
      send(res, readiness.ready ? 200 : 503, 'application/json', `${JSON.stringify(readiness)}\n`);
    } else {
      send(res, 404, 'text/plain; charset=utf-8', 'not found: try /metrics, /healthz or /readyz\n');
    }
  };
  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      logger.warn({ err: describeError(error) }, 'metrics request failed');
      if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 5_000;
  const { host, port, origin: url } = await listenOn(server, options.port, options.host);
  logger.info({ address: url }, 'metrics server listening');
  let closing: Promise<void> | undefined;
  return {
    host,
    port,
    url,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

/** What {@link serveRelayMetrics} started; `close()` stops all of it. */
export interface RelayMetricsService {
  readonly server: MetricsServer;
  readonly instrumentation: RelayInstrumentation;
  close(): Promise<void>;
}

/**
 * Everything `outbox-relay run` needs for observability in one call: instrument the relay,
 * probe its readiness, serve /metrics, /healthz and /readyz on `address`.
 *
 * @param address `host:port` or `off` (the metricsAddress setting)
 * @returns undefined when the address is `off`
 */
export async function serveRelayMetrics(
  relay: RelayStatusSource,
  options: { address: string; sampleIntervalMs?: number; kafka?: Kafka; logger?: Logger },
): Promise<RelayMetricsService | undefined> {
  return serveOnAddress(options.address, options.logger, () => {
    const instrumentation = instrumentRelay(relay, { sampleIntervalMs: options.sampleIntervalMs, logger: options.logger });
    const readiness = relayReadiness(relay, instrumentation, { kafka: options.kafka, logger: options.logger });
    return {
      instrumentation,
      registry: instrumentation.registry,
      readiness: () => readiness.check(),
      close: async () => {
        await readiness.close();
        await instrumentation.close();
      },
    };
  });
}

/**
 * Parse `address` (`host:port` or `off`), build what to serve, serve /metrics, /healthz and
 * /readyz there; on a failure to listen, close what was built. Undefined for `off`.
 */
export async function serveOnAddress<I>(
  address: string,
  logger: Logger | undefined,
  build: () => { instrumentation: I; registry: Registry; readiness: () => Promise<Readiness>; close(): Promise<void> },
): Promise<{ server: MetricsServer; instrumentation: I; close(): Promise<void> } | undefined> {
  const parsed = parseMetricsAddress(address);
  if ('problem' in parsed) throw new ConfigError('metricsAddress', parsed.problem);
  if (parsed.value === 'off') return undefined;
  const built = build();
  let server: MetricsServer;
  try {
    server = await startMetricsServer({ host: parsed.value.host, port: parsed.value.port, registry: built.registry, readiness: built.readiness, logger });
  } catch (error) {
    await built.close();
    throw error;
  }
  return {
    server,
    instrumentation: built.instrumentation,
    async close() {
      await server.close();
      await built.close();
    },
  };
}
