// Checks of deploy/: the alert rules' unit tests (promtool), the Prometheus config, the
// dashboard's queries, the compose file and the Kubernetes manifests. No Docker engine or
// cluster is needed; promtool is: scripts/promtool.sh finds it on PATH or fetches Debian's
// prometheus package into .cache/promtool (never skipped: without it these tests fail).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import { metricNames } from '../src/metrics/metricNames.js';
import { effectMetricNames } from '../src/effects/metrics.js';
import { metricsAddress } from '../src/metrics/options.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const DEPLOY = join(ROOT, 'deploy');
const read = (path: string): string => readFileSync(join(DEPLOY, path), 'utf8');
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

let promtoolPath: string | undefined;

/** The promtool binary: on PATH, or fetched by scripts/promtool.sh; throws saying why not. */
function promtoolBinary(): string {
  if (promtoolPath) return promtoolPath;
  try {
    promtoolPath = execFileSync(join(ROOT, 'scripts/promtool.sh'), [], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  } catch (error) {
    const e = error as { stderr?: string; message: string };
    throw new Error(`promtool is needed and scripts/promtool.sh could not provide it:\n${e.stderr || e.message}`);
  }
  return promtoolPath;
}

function promtool(args: string[]): string {
  const binary = promtoolBinary();
  try {
    return execFileSync(binary, args, { cwd: DEPLOY, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string };
    throw new Error(`promtool ${args.join(' ')} failed:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

/** Metric names a PromQL text refers to (recording rules, with a colon, excluded). */
function referencedMetrics(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/\b((?:outbox|process|nodejs)_[a-z0-9_]+)(?![a-z0-9_:])/g)) {
    names.add((m[1] as string).replace(/_(bucket|sum|count)$/, ''));
  }
  return names;
}

// The relay's and the consumer's metrics, and the effect guard's (outbox-relay/effects, in the consumer's process).
const OWN = new Set([...metricNames(), ...effectMetricNames()]);

test('alert rules: promtool unit tests pass', () => {
  const out = promtool(['test', 'rules', 'prometheus/alerts.test.yml']);
  assert.match(out, /SUCCESS/);
});

test('prometheus.yml and the rules it loads are valid', () => {
  const out = promtool(['check', 'config', 'prometheus/prometheus.yml']);
  assert.match(out, /SUCCESS: 1 rule files found/);
  const config = parse(read('prometheus/prometheus.yml')) as Any;
  const targets = config.scrape_configs.flatMap((s: Any) => s.static_configs.flatMap((c: Any) => c.targets)) as string[];
  assert.ok(targets.includes('relay:9464'), 'scrapes the relay on its metrics port');
});

test('every alert names a runbook section that exists, and every metric it uses exists', () => {
  const rules = parse(read('prometheus/alerts.yml')) as Any;
  const runbook = readFileSync(join(ROOT, 'docs/runbook.md'), 'utf8');
  const anchors = new Set(
    [...runbook.matchAll(/^#+ (.+)$/gm)].map((m) =>
      (m[1] as string)
        .trim()
        .toLowerCase()
        .replace(/[^a-z0-9 -]/g, '')
        .replace(/ /g, '-'),
    ),
  );
  const alerts = rules.groups.flatMap((g: Any) => g.rules).filter((r: Any) => r.alert);
  const names = alerts.map((a: Any) => a.alert);
  for (const wanted of ['OutboxOldestPendingTooOld', 'OutboxIngressAboveEgress', 'OutboxRelayRetryStorm', 'OutboxRelayDeadLettersGrowing', 'OutboxRelayDown']) {
    assert.ok(names.includes(wanted), `alert ${wanted}`);
  }
  for (const a of alerts) {
    const url = a.annotations.runbook_url as string;
    assert.match(url, /^docs\/runbook\.md#/);
    assert.ok(anchors.has(url.split('#')[1] as string), `${a.alert}: runbook anchor ${url}`);
    assert.match(a.labels.severity, /^(page|ticket)$/);
  }
  for (const name of referencedMetrics(read('prometheus/alerts.yml'))) assert.ok(OWN.has(name), `alerts use ${name}, which src/metrics/ defines`);
});

test('dashboard: valid JSON, valid PromQL, only metrics that exist, and every metric shown', () => {
  const dashboard = JSON.parse(read('grafana/dashboard.json')) as Any;
  const exprs: string[] = dashboard.panels.flatMap((p: Any) => (p.targets ?? []).map((t: Any) => t.expr as string));
  assert.ok(exprs.length > 20);
  // promtool parses every query, as a recording rule, with Grafana's variables filled in.
  const dir = mkdtempSync(join(tmpdir(), 'dashboard-'));
  try {
    const rules = {
      groups: [
        {
          name: 'dashboard',
          rules: exprs.map((expr, i) => ({
            record: `dashboard:query_${i}`,
            expr: expr.replaceAll('$__rate_interval', '5m').replaceAll('$consumer_job', '.*').replaceAll('$job', '.*'),
          })),
        },
      ],
    };
    writeFileSync(join(dir, 'rules.json'), JSON.stringify(rules));
    assert.match(promtool(['check', 'rules', join(dir, 'rules.json')]), /SUCCESS/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const used = referencedMetrics(exprs.join('\n'));
  for (const name of used) {
    if (name.startsWith('outbox_')) assert.ok(OWN.has(name), `dashboard uses ${name}, which src/metrics/ or src/effects/ defines`);
  }
  for (const name of OWN) assert.ok(used.has(name), `dashboard shows ${name}`);
});

test('Dockerfile: multi-stage, production dependencies only, non-root, signals reach node', () => {
  const text = read('Dockerfile');
  const stages = [...text.matchAll(/^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/gim)].map((m) => m[2]);
  assert.ok(stages.length >= 3, 'build, deps and runtime stages');
  // The base is a supported Node LTS (24, "Krypton"), not Node 20, past end of life since April 2026.
  const base = /^ARG NODE_IMAGE=(\S+)$/m.exec(text)?.[1];
  assert.match(base ?? '', /^node:24[.-]/, `NODE_IMAGE is a Node 24 LTS image (${base})`);
  for (const m of text.matchAll(/^FROM\s+(\S+)/gim)) assert.doesNotMatch(m[1] as string, /^node:(1\d|20|21|23)\b/, `no end-of-life Node base (${m[1]})`);
  assert.match(text, /npm ci --omit=dev/);
  const runtime = text.slice(text.search(/^FROM .* AS runtime$/m));
  const user = /^USER\s+(\S+)/m.exec(runtime)?.[1];
  assert.ok(user && !/^(root|0)(:|$)/.test(user), `non-root USER (${user})`);
  assert.match(user, /^\d+:\d+$/, 'numeric, for runAsNonRoot');
  assert.match(runtime, /^ENTRYPOINT \["\/usr\/bin\/tini", "--", "node", "dist\/cli\.js"\]$/m, 'exec form behind tini');
  assert.match(runtime, /^EXPOSE 9464$/m);
  assert.match(runtime, /OUTBOX_METRICS_ADDRESS=0\.0\.0\.0:9464/, 'scrapable from outside the container');
  assert.equal(metricsAddress.defaultValue, '127.0.0.1:9464', 'outside containers, loopback by default');
  assert.ok(existsSync(join(DEPLOY, 'Dockerfile.dockerignore')));
});

test('the docs name the Node image the Dockerfile builds on, and no other', () => {
  const base = /^ARG NODE_IMAGE=(\S+)$/m.exec(read('Dockerfile'))?.[1];
  assert.ok(base, 'the Dockerfile names its base in ARG NODE_IMAGE');
  const pages = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  const named = pages.flatMap((page) => [...readFileSync(join(ROOT, page), 'utf8').matchAll(/\bnode:\d+[\w.-]*/g)].map((m) => `${page}: ${m[0]}`));
  assert.ok(named.length >= 1, 'the docs name the image somewhere (docs/operations.md, Deployment)');
  assert.deepEqual(named.filter((n) => !n.endsWith(`: ${base}`)), [], `images named in the docs that are not the Dockerfile's ${base}`);
});

test('docker-compose.yml: every service wired, secrets from files, images consistent', () => {
  const compose = parse(read('docker-compose.yml')) as Any;
  const s = compose.services;
  for (const name of ['postgres', 'kafka', 'relay', 'consumer', 'prometheus', 'grafana']) assert.ok(s[name], `service ${name}`);
  assert.equal(s.kafka.image, 'apache/kafka:3.9.1');
  assert.match(s.kafka.environment.KAFKA_PROCESS_ROLES, /controller/, 'KRaft, no ZooKeeper');
  assert.equal(s.relay.build.dockerfile, 'deploy/Dockerfile');
  assert.equal(s.consumer.build.target, 'example-consumer');
  assert.equal(s.relay.image, s['db-init'].image);
  assert.equal(s.relay.environment.OUTBOX_METRICS_ADDRESS, '0.0.0.0:9464');
  assert.equal(s.relay.environment.KAFKA_BROKERS, 'kafka:9092');
  assert.match(s.kafka.environment.KAFKA_ADVERTISED_LISTENERS, /kafka:9092/);
  assert.ok(!('DATABASE_URL' in s.relay.environment), 'the database URL comes from a secret file');
  assert.equal(s.relay.environment.DATABASE_URL_FILE, '/run/secrets/relay_database_url');
  for (const [name, service] of Object.entries<Any>(s)) {
    for (const secret of service.secrets ?? []) assert.ok(compose.secrets[secret], `${name}: secret ${secret} defined`);
    for (const volume of service.volumes ?? []) {
      const source = String(volume).split(':')[0] as string;
      if (source.startsWith('.')) assert.ok(existsSync(join(DEPLOY, source)), `${name}: ${source} exists`);
    }
    assert.ok(!JSON.stringify(service.command ?? '').match(/password|postgres:\/\//i), `${name}: no secret on the command line`);
  }
  for (const secret of Object.values<Any>(compose.secrets)) assert.ok(existsSync(join(DEPLOY, secret.file)), `${secret.file} exists`);
  assert.deepEqual(s.relay.depends_on['db-init'], { condition: 'service_completed_successfully' });
  assert.ok(existsSync(join(DEPLOY, 'grafana/provisioning/datasources/prometheus.yml')));
  assert.ok(existsSync(join(DEPLOY, 'grafana/provisioning/dashboards/outbox-relay.yml')));
});

test('Kubernetes manifests: probes, resources, securityContext, secrets from Secret objects', () => {
  const dir = join(DEPLOY, 'k8s');
  const docs: Any[] = readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .flatMap((f) =>
      parseAllDocuments(readFileSync(join(dir, f), 'utf8')).map((d) => {
        assert.deepEqual(d.errors, [], f);
        return { file: f, ...(d.toJSON() as Any) };
      }),
    );
  for (const d of docs) assert.ok(d.apiVersion && d.kind && d.metadata?.name, `${d.file}: apiVersion, kind, metadata.name`);
  const secret = docs.find((d) => d.kind === 'Secret' && d.metadata.name === 'outbox-relay');
  assert.ok(secret, 'an example Secret');
  const secretKeys = new Set(Object.keys(secret.stringData));
  const deployments = docs.filter((d) => d.kind === 'Deployment');
  assert.equal(deployments.length, 2, 'standalone and sidecar');
  let standalone = 0;
  let sidecar = 0;
  for (const d of deployments) {
    const pod = d.spec.template.spec;
    assert.equal(pod.securityContext.runAsNonRoot, true, `${d.metadata.name}: runAsNonRoot`);
    assert.ok(pod.terminationGracePeriodSeconds > 15, 'longer than the 15 s shutdown timeout');
    const relays = pod.containers.filter((c: Any) => /outbox-relay:/.test(c.image));
    assert.equal(relays.length, 1, `${d.metadata.name}: one relay container`);
    const c = relays[0];
    if (pod.containers.length > 1) sidecar++;
    else standalone++;
    assert.equal(c.securityContext.allowPrivilegeEscalation, false);
    assert.equal(c.securityContext.readOnlyRootFilesystem, true);
    assert.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
    assert.ok(c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory, 'resources');
    const port = c.ports.find((p: Any) => p.name === 'metrics');
    assert.equal(port.containerPort, 9464);
    const env = Object.fromEntries(c.env.map((e: Any) => [e.name, e]));
    assert.equal(env.OUTBOX_METRICS_ADDRESS.value, `0.0.0.0:${port.containerPort}`);
    assert.deepEqual(c.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' });
    if (c.readinessProbe) assert.deepEqual(c.readinessProbe.httpGet, { path: '/readyz', port: 'metrics' });
    for (const e of c.env) {
      if (/PASSWORD$|^DATABASE_URL$/.test(e.name)) {
        assert.equal(e.value, undefined, `${e.name} is not a literal`);
        assert.equal(e.valueFrom.secretKeyRef.name, 'outbox-relay');
        assert.ok(secretKeys.has(e.valueFrom.secretKeyRef.key), `key ${e.valueFrom.secretKeyRef.key} in the Secret`);
      }
      if (/_FILE$/.test(e.name) && /PASSWORD|DATABASE_URL/.test(e.name)) {
        const mount = c.volumeMounts.find((m: Any) => (e.value as string).startsWith(`${m.mountPath}/`));
        assert.ok(mount, `${e.name} points into a mount`);
        const volume = pod.volumes.find((v: Any) => v.name === mount.name);
        assert.equal(volume.secret.secretName, 'outbox-relay', `${e.name} comes from the Secret`);
        for (const item of volume.secret.items) assert.ok(secretKeys.has(item.key));
      }
      assert.ok(!/postgres:\/\/[^@]*:[^@]*@/.test(String(e.value ?? '')), 'no password in a literal');
    }
    assert.ok(!JSON.stringify(c.args ?? []).match(/password|postgres:\/\//i), 'no secret in args');
  }
  assert.equal(standalone, 1);
  assert.equal(sidecar, 1);
  const own = deployments.find((d) => d.spec.template.spec.containers.length === 1);
  assert.deepEqual(own.spec.template.spec.containers[0].readinessProbe.httpGet, { path: '/readyz', port: 'metrics' });
  assert.ok(docs.some((d) => d.kind === 'Service' && d.spec.ports.some((p: Any) => p.port === 9464)));
  assert.ok(dirname(DEPLOY));
});

test('compose init script: every module it imports from the image (/app/dist/...) is one the build emits, with the names it imports', async () => {
  const text = read('compose/init.mjs');
  const imports = [...text.matchAll(/^import \{ ([^}]+) \} from '\/app\/dist\/([^']+)\.js';$/gm)];
  assert.ok(imports.length >= 2, 'init.mjs imports migrate and roleScript from the image');
  for (const [, names, path] of imports) {
    // The image's dist/ is tsconfig.build.json's output of src/: dist/P.js is src/P.ts.
    const source = join(ROOT, 'src', `${path}.ts`);
    assert.ok(existsSync(source), `/app/dist/${path}.js: the build emits no such file (no src/${path}.ts)`);
    const mod = (await import(source)) as Record<string, unknown>;
    for (const name of names!.split(',').map((n) => n.trim())) assert.equal(typeof mod[name], 'function', `/app/dist/${path}.js exports ${name}`);
  }
});
