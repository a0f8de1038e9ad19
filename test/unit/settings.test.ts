import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../src/shared/errors.js';
import { quoteIdentifier } from '../../src/shared/identifiers.js';
import { readSetting } from '../../src/shared/settings.js';
import { kafkaBrokers, databaseUrl, schema } from '../../src/shared/commonSettings.js';
import { batchSize } from '../../src/relay/options.js';
import { resolveRelayOptions } from '../../src/relay/options.js';
import { backoffDelayMs } from '../../src/shared/backoff.js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

test('a flag wins over the environment, which wins over the default', () => {
  assert.equal(readSetting(batchSize, '7', { OUTBOX_BATCH_SIZE: '9' }), 7);
  assert.equal(readSetting(batchSize, undefined, { OUTBOX_BATCH_SIZE: '9' }), 9);
  assert.equal(readSetting(batchSize, undefined, {}), 500);
});

test('a bad value names where it came from and what is accepted', () => {
  assert.throws(() => readSetting(batchSize, '0', {}), (e: ConfigError) => e.setting === '--batch-size' && /from 1 to 10000/.test(e.message) && !e.retriable);
  assert.throws(() => readSetting(batchSize, undefined, { OUTBOX_BATCH_SIZE: '1.5' }), /OUTBOX_BATCH_SIZE: "1.5" is not a whole number/);
  assert.throws(() => readSetting(kafkaBrokers, 'a:1,,b', {}), /"b" is not host:port/);
  assert.deepEqual(readSetting(kafkaBrokers, ' a:1 , [::1]:9092 ', {}), ['a:1', '[::1]:9092']);
});

test('secrets come from the environment or a *_FILE, never a flag, and are never echoed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-'));
  const file = join(dir, 'url');
  writeFileSync(file, 'postgres://relay:pw@db:5432/app\n');
  assert.equal(databaseUrl.flag, undefined);
  assert.equal(readSetting(databaseUrl, undefined, { DATABASE_URL_FILE: file }), 'postgres://relay:pw@db:5432/app');
  assert.throws(
    () => readSetting(databaseUrl, undefined, { DATABASE_URL: 'mysql://u:topsecret@h/db' }),
    (e: Error) => /scheme "mysql:"/.test(e.message) && !e.message.includes('topsecret'),
  );
  assert.throws(() => readSetting(databaseUrl, undefined, { DATABASE_URL_FILE: join(dir, 'missing') }), /DATABASE_URL_FILE: cannot read/);
});

test('identifiers are validated before they are quoted', () => {
  assert.equal(quoteIdentifier('app_events'), '"app_events"');
  for (const bad of ['x"; drop table y; --', '', '1abc', 'a-b', 'a'.repeat(64), 'Ünïcode']) {
    assert.throws(() => quoteIdentifier(bad, 'schema'), ConfigError, bad);
  }
  assert.equal(schema.check('x"; drop table y; --')?.includes('not a valid name'), true);
});

test('library options are validated up front with the option name', () => {
  const base = { databaseUrl: 'postgres://h/db', kafkaBrokers: ['h:9092'] };
  assert.equal(resolveRelayOptions(base).batchSize, 500);
  assert.throws(() => resolveRelayOptions({ ...base, batchSize: -1 }), /^ConfigError: batchSize: -1 is not a whole number/);
  assert.throws(() => resolveRelayOptions({ ...base, pollIntervalMs: 0.5 }), /pollIntervalMs/);
  assert.throws(() => resolveRelayOptions({ ...base, kafkaBrokers: [] }), /kafkaBrokers: needs at least one/);
  assert.throws(() => resolveRelayOptions({ ...base, schema: 'a;b' }), /schema/);
});

test('backoff is full jitter under an exponential ceiling', () => {
  assert.equal(backoffDelayMs(0, 100, 30_000, () => 0.999999), 99);
  assert.equal(backoffDelayMs(3, 100, 30_000, () => 0.5), 400);
  assert.equal(backoffDelayMs(50, 100, 30_000, () => 0.999999), 29_999);
  assert.equal(backoffDelayMs(5, 100, 30_000, () => 0), 0);
});
