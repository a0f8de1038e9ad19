import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { Kafka, logLevel } from 'kafkajs';
import { Registry } from 'prom-client';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { instrumentRelay } from '../src/metrics/relayMetrics.js';
import { relayReadiness } from '../src/metrics/readiness.js';
import { serveRelayMetrics, startMetricsServer, type MetricsServer } from '../src/metrics/server.js';
import { metricsAddress, parseMetricsAddress } from '../src/metrics/options.js';
import { readSetting } from '../src/shared/settings.js';
import { ConfigError } from '../src/shared/errors.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { testBrokers, testKafka } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('health');
});
const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  await db.drop();
});

interface Reply {
  status: number;
  type: string;
  body: string;
}

function get(url: string, method = 'GET'): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function serve(relay: Relay, kafka?: Kafka): Promise<MetricsServer> {
  const inst = instrumentRelay(relay, { registry: new Registry(), sampleIntervalMs: 100 });
  const readiness = relayReadiness(relay, inst, { kafka, timeoutMs: 1_000, kafkaCacheMs: 0 });
  const server = await startMetricsServer({ host: '127.0.0.1', port: 0, registry: inst.registry, readiness: () => readiness.check() });
  cleanups.push(() => inst.close(), () => readiness.close(), () => server.close());
  return server;
}

function relayOn(options: { databaseUrl?: string; kafka?: Kafka }): Relay {
  const relay = createRelay({
    producer: TEST_PRODUCER,
    // Other tests' transactions share this database: do not wait a minute behind one.
    horizonMaxWaitMs: 1_000,
    databaseUrl: options.databaseUrl ?? db.databaseUrl,
    kafkaBrokers: testBrokers(),
    schema: db.schema,
    kafka: options.kafka,
    retryMaxDelayMs: 50,
    shutdownTimeoutMs: 5_000,
  });
  cleanups.push(() => relay.stop());
  return relay;
}

test('integration: /healthz, /readyz and /metrics of a running relay; not ready once it stopped', async () => {
  const relay = relayOn({ kafka: testKafka() });
  const server = await serve(relay);
  assert.equal(server.host, '127.0.0.1', 'bound where configured');
  await relay.start();

  const health = await get(`${server.url}/healthz`);
  assert.equal(health.status, 200);
  assert.equal(health.body, 'ok\n');

  const ready = await waitFor('ready', async () => {
    const r = await get(`${server.url}/readyz`);
    return r.status === 200 ? r : undefined;
  });
  assert.equal(ready.type, 'application/json');
  const report = JSON.parse(ready.body) as { ready: boolean; checks: Record<string, { ok: boolean; detail: string }> };
  assert.equal(report.ready, true);
  assert.deepEqual(Object.keys(report.checks).sort(), ['batches', 'claim', 'database', 'kafka', 'publishing', 'schema', 'shards']);
  assert.ok(Object.values(report.checks).every((c) => c.ok));
  assert.match(report.checks.shards?.detail ?? '', /^(owns \d+ shard\(s\)|waiting for shards)$/);

  const metrics = await get(`${server.url}/metrics`);
  assert.equal(metrics.status, 200);
  assert.match(metrics.type, /^text\/plain; version=0\.0\.4/);
  assert.match(metrics.body, /^# TYPE outbox_relay_pending_rows gauge$/m);
  assert.match(metrics.body, /^outbox_relay_running\{outbox="default"\} 1$/m);
  assert.match(metrics.body, /^process_resident_memory_bytes \d+/m, 'default process metrics');
  assert.match(metrics.body, /^nodejs_eventloop_lag_seconds /m);

  assert.equal((await get(`${server.url}/other`)).status, 404);
  assert.equal((await get(`${server.url}/metrics`, 'POST')).status, 405);
  assert.equal((await get(`${server.url}/healthz`, 'HEAD')).status, 200);

  await relay.stop();
  const stopped = await get(`${server.url}/readyz`);
  assert.equal(stopped.status, 503);
  assert.deepEqual((JSON.parse(stopped.body) as { checks: { shards: unknown } }).checks.shards, { ok: false, detail: 'relay stopped' });
  assert.equal((await get(`${server.url}/healthz`)).status, 200, 'alive still: the process answers');
});

test('integration: /readyz is 503 naming Kafka when no broker answers', async () => {
  const dead = new Kafka({ clientId: 'dead', brokers: ['127.0.0.1:1'], logLevel: logLevel.NOTHING, retry: { retries: 0 }, connectionTimeout: 200 });
  const relay = relayOn({ kafka: dead });
  const server = await serve(relay);
  await relay.start();
  const r = await get(`${server.url}/readyz`);
  assert.equal(r.status, 503);
  const report = JSON.parse(r.body) as { ready: boolean; checks: Record<string, { ok: boolean; detail: string }> };
  assert.equal(report.ready, false);
  assert.equal(report.checks.database?.ok, true);
  assert.equal(report.checks.kafka?.ok, false);
  assert.match(report.checks.kafka?.detail ?? '', /^(kafka|network)_[a-z_]+$/, 'an error class, no message');
  assert.equal((await get(`${server.url}/healthz`)).status, 200);
  await relay.abort();
});

test('integration: /readyz is 503 naming the database when Postgres does not answer', async () => {
  // Never started (start would fail): the readiness probe still answers, and says why.
  const relay = relayOn({ databaseUrl: 'postgres://postgres@127.0.0.1:1/test', kafka: testKafka() });
  const server = await serve(relay);
  const r = await get(`${server.url}/readyz`);
  assert.equal(r.status, 503);
  const report = JSON.parse(r.body) as { checks: Record<string, { ok: boolean; detail: string }> };
  assert.equal(report.checks.database?.ok, false);
  assert.equal(report.checks.kafka?.ok, true);
  assert.ok(!r.body.includes('postgres://'), 'no connection string in the answer');
});

test('metrics address setting: host:port, IPv6, off; bad values name the setting', () => {
  assert.deepEqual(parseMetricsAddress('off'), { value: 'off' });
  assert.deepEqual(parseMetricsAddress('0.0.0.0:9464'), { value: { host: '0.0.0.0', port: 9464 } });
  assert.deepEqual(parseMetricsAddress('[::]:9464'), { value: { host: '::', port: 9464 } });
  assert.deepEqual(parseMetricsAddress('metrics.local:80'), { value: { host: 'metrics.local', port: 80 } });
  for (const bad of ['9464', ':9464', 'host:', 'host:99999', 'a b:1']) assert.ok('problem' in parseMetricsAddress(bad), bad);
  assert.equal(readSetting(metricsAddress, undefined, {}), '127.0.0.1:9464');
  assert.equal(readSetting(metricsAddress, undefined, { OUTBOX_METRICS_ADDRESS: 'OFF' }), 'off');
  assert.equal(readSetting(metricsAddress, '[::1]:9000', { OUTBOX_METRICS_ADDRESS: 'off' }), '[::1]:9000');
  assert.throws(() => readSetting(metricsAddress, 'nope', {}), (e: unknown) => e instanceof ConfigError && e.setting === '--metrics-address');
});

test('integration: serveRelayMetrics serves on the configured address, or nothing when off', async () => {
  const relay = relayOn({ kafka: testKafka() });
  assert.equal(await serveRelayMetrics(relay, { address: 'off' }), undefined);
  const service = await serveRelayMetrics(relay, { address: '127.0.0.1:0', sampleIntervalMs: 100 });
  assert.ok(service);
  cleanups.push(() => service.close());
  assert.equal(service.server.host, '127.0.0.1');
  await relay.start();
  await waitFor('ready', async () => (await get(`${service.server.url}/readyz`)).status === 200);
  assert.match((await get(`${service.server.url}/metrics`)).body, /^outbox_relay_pending_rows\{outbox="default"\} 0$/m);
  await relay.stop();
  await service.close();
  await assert.rejects(get(`${service.server.url}/healthz`), 'closed: nothing listens any more');
});
