import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { producer } from '../../src/relay/options.js';
import { readSetting } from '../../src/shared/settings.js';
import { testProducerFrom } from '../helpers/producer.js';

// Tests run what users run: with OUTBOX_TEST_PRODUCER unset, the relay tests and the
// adapter guard take the adapter the product publishes through by default, so a plain
// `npm test` is not a test of the second adapter only (kafkajs stays CI's second pass).
const GUARD = fileURLToPath(new URL('../helpers/adapterGuard.mjs', import.meta.url));

test("OUTBOX_TEST_PRODUCER unset: the tests' adapter is the product's default one (the relay's producer setting)", () => {
  const productDefault = readSetting(producer, undefined, {});
  assert.equal(productDefault, 'platformatic', 'precondition: the product default this test is about');
  assert.equal(testProducerFrom(undefined), productDefault);
  assert.equal(testProducerFrom('  '), productDefault);
});

test("OUTBOX_TEST_PRODUCER unset: the adapter guard expects the product's default adapter and hands it to the processes it starts", () => {
  const { OUTBOX_TEST_PRODUCER: _unset, NODE_OPTIONS: _options, OUTBOX_TEST_ADAPTER_REPORTS: _reports, OUTBOX_TEST_NODE_MAJOR: _major, ...env } = process.env;
  const child = spawnSync(process.execPath, ['--import', GUARD, '-e', 'process.stdout.write(process.env.OUTBOX_TEST_PRODUCER ?? "(unset)")'], { env, encoding: 'utf8' });
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout, readSetting(producer, undefined, {}));
});
