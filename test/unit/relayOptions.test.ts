// Options are resolved once, at the boundary: a resolved object is used as it is by
// createRelay and the relay group, and the relay group resolves each outbox once, not at
// every start attempt. Observed through a TLS file, which resolving reads: once it is
// gone, a second resolution would fail.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isResolvedRelayOptions, resolveRelayOptions } from '../../src/relay/options.js';
import { createRelay } from '../../src/relay/relay.js';
import { createRelayGroup } from '../../src/relay/relayGroup.js';
import { ConfigError } from '../../src/shared/errors.js';

const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

function caFile(): { path: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'relay-options-'));
  const path = join(dir, 'ca.pem');
  writeFileSync(path, PEM);
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

test('resolveRelayOptions returns resolved options as they are, and createRelay uses them without resolving again', () => {
  const ca = caFile();
  const resolved = resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'], kafkaSslCaFile: ca.path, batchSize: 7 });
  ca.remove();
  assert.ok(isResolvedRelayOptions(resolved));
  assert.equal(resolveRelayOptions(resolved), resolved);
  const relay = createRelay(resolved);
  assert.equal(relay.options, resolved);
  assert.deepEqual(relay.options.kafkaSecurity.ssl, { ca: [PEM] });
  // The brand is not enumerable: a copy is validated again, and keeps the TLS it carries.
  const copy = resolveRelayOptions({ ...resolved, batchSize: 9 });
  assert.notEqual(copy, resolved);
  assert.equal(copy.batchSize, 9);
  assert.deepEqual(copy.kafkaSecurity.ssl, { ca: [PEM] });
  assert.throws(() => resolveRelayOptions({ ...resolved, batchSize: -1 }), ConfigError);
  // Plain options are resolved: the file is read then.
  assert.throws(() => resolveRelayOptions({ databaseUrl: 'postgres://h/d', kafkaBrokers: ['b:1'], kafkaSslCaFile: ca.path }), /kafkaSslCaFile: cannot read/);
});

test('a relay group resolves each outbox once: its start attempts reuse those options', async () => {
  // A port nothing listens on: every start attempt fails fast on the database.
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  const ca = caFile();
  const group = createRelayGroup({
    outboxes: [{ name: 'one', databaseUrl: `postgres://u@127.0.0.1:${port}/d`, schema: 'public' }],
    kafkaBrokers: ['127.0.0.1:1'],
    kafkaSslCaFile: ca.path,
    retryMaxDelayMs: 10,
  });
  ca.remove();
  assert.ok(isResolvedRelayOptions(group.options));
  const errors: Error[] = [];
  group.on('outbox', (e) => {
    if (e.error) errors.push(e.error);
  });
  await group.start();
  try {
    // Wait for a retry too: the retries must not resolve again either.
    await new Promise<void>((resolve) => {
      const check = (): void => {
        if (errors.length >= 2) resolve();
        else group.once('outbox', check);
      };
      check();
    });
  } finally {
    await group.stop();
  }
  for (const e of errors) assert.doesNotMatch(e.message, /kafkaSslCaFile/, 'a start attempt read the CA file again');
  assert.match(errors[0]!.message, /127\.0\.0\.1/);
});
