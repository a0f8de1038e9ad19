import { test } from 'node:test';
import assert from 'node:assert/strict';
import { idleProbeDelayMs } from '../../src/relay/horizonLoop.js';
import { resolveRelayOptions } from '../../src/relay/options.js';

// Issue 34 item 7: an idle relay's probes are what it costs idle; the schedule below is
// what docs/configuration.md ("Idle polling") promises.
const defaults = resolveRelayOptions({ databaseUrl: 'postgres://x@localhost/db', kafkaBrokers: ['k:9092'] });

test('the idle probe: the poll interval under traffic, up to 100 ms after 0.2 s of silence, up to idlePollMaxMs (1 s by default) after 2 s', () => {
  assert.equal(defaults.idlePollMaxMs, 1_000);
  const poll = defaults.pollIntervalMs;
  const delay = (quietProbes: number, silenceMs: number): number => idleProbeDelayMs(poll, defaults.idlePollMaxMs, quietProbes, silenceMs);
  assert.equal(delay(0, 0), 10);
  assert.equal(delay(19, 190), 10, '20 quiet probes before any backoff');
  assert.equal(delay(20, 200), 20, 'then the interval doubles');
  assert.equal(delay(40, 1_500), 100, 'a silence under 2 s stays at 100 ms: pick-up between sparse rows is unchanged');
  assert.equal(delay(40, 2_000), 1_000, 'after 2 s of silence: one probe a second');
  assert.equal(delay(400, 600_000), 1_000, 'and no longer than that, however long the silence');
});

test('the idle probe: idlePollMaxMs 100 keeps the 100 ms ceiling; a lower one caps both stages; a poll interval above it wins', () => {
  assert.equal(idleProbeDelayMs(10, 100, 40, 60_000), 100);
  assert.equal(idleProbeDelayMs(10, 50, 40, 1_000), 50);
  assert.equal(idleProbeDelayMs(10, 50, 40, 60_000), 50);
  assert.equal(idleProbeDelayMs(2_000, 1_000, 40, 60_000), 2_000);
});
