// What loads `@opentelemetry/api`, for README's and docs/operations.md's Tracing: prom-client
// (a dependency) requires it when outbox-relay is imported; outbox-relay's own code imports
// it only at its first traced operation. Watched through a module resolve hook, so the
// package's modules are imported here (dynamically) only after the hook is in place.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire, register } from 'node:module';
import { MessageChannel, receiveMessageOnPort } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';

// Posts the importing module of every ESM resolution of the API (synchronously, before the
// import completes, so draining the port after an import sees all of its resolutions).
const HOOK = `
let port;
export function initialize(data) { port = data.port; }
export async function resolve(specifier, context, next) {
  if (specifier === '@opentelemetry/api') port.postMessage(context.parentURL ?? '');
  return next(specifier, context);
}`;

const { port1, port2 } = new MessageChannel();
register(`data:text/javascript,${encodeURIComponent(HOOK)}`, import.meta.url, { data: { port: port2 }, transferList: [port2] });

function importers(): string[] {
  const out: string[] = [];
  for (let m = receiveMessageOnPort(port1); m; m = receiveMessageOnPort(port1)) out.push(fileURLToPath(m.message as string));
  return out;
}

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));
const ours = (paths: string[]): string[] => paths.filter((p) => p.startsWith(SRC));

test('importing outbox-relay: prom-client loads @opentelemetry/api, our code does not until the first traced operation', async () => {
  const index = (await import('../../src/index.js')) as Record<string, unknown>;
  assert.ok(typeof index.createRelay === 'function');
  assert.deepEqual(ours(importers()), [], 'no module of ours imported the API');
  const require = createRequire(import.meta.url);
  const apiMain = require.resolve('@opentelemetry/api', { paths: [require.resolve('prom-client')] });
  assert.ok(require.cache[apiMain], 'prom-client required the API (its CommonJS build) when it was loaded');

  const { loadTracingApi } = await import('../../src/shared/tracing.js');
  assert.ok(await loadTracingApi());
  assert.deepEqual(ours(importers()), [fileURLToPath(new URL('../../src/shared/tracing.ts', import.meta.url))], 'tracing.ts imports it, at first use');
});
