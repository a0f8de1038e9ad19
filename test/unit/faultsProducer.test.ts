// The fault suite's producer adapter (--producer): the runs it plans say it, and the
// self-check fails a run whose relays did not publish through it (pure logic, no servers).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PROFILES, planRuns } from '../faults/profiles.js';
import { expectedTally, selfCheck, selfCheckFailures } from '../faults/selfCheck.js';

const ci = PROFILES.ci!;

test('fault runs: the relay\'s default adapter (platformatic) unless --producer says otherwise; the other adapter names its runs and repeats with its flag', () => {
  const [plain] = planRuns({ profile: 'ci', seed: 7, plant: 'none', verifyPlanted: false });
  assert.equal(plain!.producer, 'platformatic');
  assert.equal(plain!.name, 'ci-7');
  assert.equal(plain!.command, 'npx tsx test/faults/run.ts --profile ci --seed 7');
  const runs = planRuns({ profile: 'ci', seed: 7, plant: 'none', verifyPlanted: true, producer: 'kafkajs' });
  assert.deepEqual(runs.map((r) => [r.name, r.producer]), [
    ['ci-7-kafkajs', 'kafkajs'],
    ['ci-7-kafkajs-dedup-off', 'kafkajs'],
    ['ci-7-kafkajs-horizon-off', 'kafkajs'],
  ]);
  assert.equal(runs[0]!.command, 'npx tsx test/faults/run.ts --profile ci --seed 7 --producer kafkajs');
  assert.equal(runs[1]!.command, 'npx tsx test/faults/run.ts --profile ci --seed 7 --producer kafkajs --plant dedup-off');
});

test('self-check: relays that did not all publish through the run\'s adapter fail the run', () => {
  const expected = expectedTally(ci);
  assert.equal(expected.relaysOnProducer, ci.relays);
  const faithful = { ...expected, faults: { ...expected.faults } };
  assert.deepEqual(selfCheckFailures(selfCheck(expected, faithful)), []);
  for (const onAdapter of [0, ci.relays - 1]) {
    const actual = { ...faithful, relaysOnProducer: onAdapter };
    assert.deepEqual(selfCheckFailures(selfCheck(expected, actual)), [`self-check: relays on the producer adapter ${onAdapter} of ${ci.relays}`]);
  }
});
