import { test } from 'node:test';
import assert from 'node:assert/strict';
import { flowChart } from '../../src/console/web/chart.js';
import { JSON_INDENT_LEVELS, JSON_MAX_CHARS, prettyJsonText } from '../../src/console/web/format.js';
import { LoginThrottle, MAX_ADDRESS_FAILURES, MAX_FAILURES, THROTTLE_CAPACITY } from '../../src/console/web/sessions.js';

// Issue 33: what an attacker with a real browser found in the console, pinned on the pure
// logic (the HTTP and browser tests are test/console.hardening.integration.test.ts).

test('login throttle: 10,000 made-up names (from one address or from as many) do not reset the throttle of the real one; an address is throttled by itself', () => {
  let now = 1_000_000;
  const t = new LoginThrottle(() => now);
  for (let i = 0; i < MAX_FAILURES; i++) t.failed('alice', '10.0.0.1');
  assert.ok(t.waitMs('alice', '10.0.0.2') > 0, 'precondition: alice is throttled');
  // A botnet: each made-up name once, each from its own address, more than the memory holds.
  for (let i = 0; i <= THROTTLE_CAPACITY; i++) t.failed(`made-up-${i}`, `172.16.${i >> 8}.${i & 255}`);
  assert.ok(t.waitMs('alice', '10.0.0.3') > 0, 'alice is still throttled after 10,001 other names failed');
  const size = t.size;
  assert.ok(size.names <= 2 * THROTTLE_CAPACITY && size.addresses <= 2 * THROTTLE_CAPACITY, `memory stays bounded: ${JSON.stringify(size)}`);
  // One address trying names by the thousand is refused after its own limit, whatever the name.
  now += 61_000;
  for (let i = 0; i < MAX_ADDRESS_FAILURES; i++) t.failed(`guess-${i}`, '192.0.2.7');
  assert.ok(t.waitMs('a-name-never-tried', '192.0.2.7') > 0, 'the address is throttled');
  assert.equal(t.addressLimited('192.0.2.7'), true);
  assert.equal(t.waitMs('a-name-never-tried', '192.0.2.8'), 0, 'another address is not');
  // A good password from that address clears its name, not the address.
  t.succeeded('guess-0');
  assert.ok(t.waitMs('guess-0', '192.0.2.7') > 0, 'the address stays throttled after a success');
});

test('login throttle: past its capacity it forgets the entry failed longest ago first', () => {
  let now = 0;
  const t = new LoginThrottle(() => now, 3);
  const failTimes = (name: string, n: number): void => {
    now += 1;
    for (let i = 0; i < n; i++) t.failed(name, `addr-${name}-${i}`);
  };
  failTimes('n1', MAX_FAILURES - 1);
  failTimes('n2', MAX_FAILURES - 1);
  failTimes('n3', 1);
  failTimes('n4', 1); // a fourth name: the oldest, n1, goes
  assert.equal(t.size.names, 3);
  failTimes('n2', 1);
  assert.ok(t.waitMs('n2', 'x') > 0, 'n2 was kept: this failure reaches the limit');
  failTimes('n1', 1);
  assert.equal(t.waitMs('n1', 'x'), 0, 'n1 was forgotten: one failure now');
});

test('prettyJsonText: the same as JSON.stringify(…, null, 2) on JSON as Postgres writes it; 10,000 levels deep print without recursion, indentation and length bounded', () => {
  const samples = [
    '{"a": 1, "b": [1, 2, {"c": "x\\"y,z:[]{}"}], "d": {}, "e": [], "f": null, "g": true, "h": "é\\\\"}',
    '[]',
    '"text"',
    '12.5',
    '[[], [{}], {"k": [[[1]]]}]',
  ];
  for (const text of samples) assert.equal(prettyJsonText(text), JSON.stringify(JSON.parse(text), null, 2), text);
  const deep = `${'['.repeat(10_000)}1${']'.repeat(10_000)}`;
  assert.throws(() => JSON.stringify(JSON.parse(deep), null, 2), RangeError, 'precondition: the recursive printer overflows the stack');
  const printed = prettyJsonText(deep);
  assert.ok(printed.startsWith('[\n  [\n    ['));
  assert.ok(printed.length <= JSON_MAX_CHARS + 200, `bounded: ${printed.length}`);
  assert.ok(!printed.includes(' '.repeat(2 * JSON_INDENT_LEVELS + 1)), 'indented at most JSON_INDENT_LEVELS deep');
  assert.match(printed, /more characters of the payload not shown$/);
  const small = prettyJsonText(`${'{"a": '.repeat(100)}1${'}'.repeat(100)}`);
  assert.equal(small.replace(/\s/g, ''), `${'{"a":'.repeat(100)}1${'}'.repeat(100)}`, 'nothing lost below the cap');
});

test('flow chart: ingress of a minute with no mark before it is n/a, not 0, and rates are over the minutes observed, not the hour', () => {
  const start = Date.UTC(2026, 0, 1, 10, 0);
  // A relay started two minutes ago: the first minute it recorded has no mark before it.
  const flow = Array.from({ length: 60 }, (_, i) => ({
    minute: new Date(start + i * 60_000),
    recorded: i >= 58,
    ingress: i === 59 ? 120 : null,
    egress: i >= 58 ? 100 : 0,
    deadLettered: 0,
  }));
  const text = flowChart('f', flow).text;
  assert.match(text, /Per minute: ingress 120 over the minute measured, egress 100 over the 2 minutes recorded\./);
  assert.match(text, /<th scope="row">10:58<\/th><td class="num">n\/a<\/td><td class="num">100<\/td>/);
  // Before any minute can be measured: n/a, never a low number.
  const first = flowChart('g', flow.map((m, i) => ({ ...m, recorded: i === 59, ingress: null }))).text;
  assert.match(first, /Per minute: ingress n\/a \(it needs two minutes recorded in a row\), egress 100 over the minute recorded\./);
});
