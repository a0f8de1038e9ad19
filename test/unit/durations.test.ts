import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatDuration, parseDuration, parseTimePoint } from '../../src/shared/durations.js';
import { cleanupRetention, replayRate } from '../../src/commands/options.js';
import { optionValue, readSetting } from '../../src/shared/settings.js';
import { ConfigError } from '../../src/shared/errors.js';

test('parseDuration reads one or several <number><unit> parts', () => {
  const cases: Array<[string, number]> = [
    ['45s', 45_000],
    ['30m', 1_800_000],
    ['12h', 43_200_000],
    ['7d', 604_800_000],
    ['2w', 1_209_600_000],
    ['250ms', 250],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    [' 7D ', 604_800_000],
    ['0s', 0],
  ];
  for (const [text, ms] of cases) assert.deepEqual(parseDuration(text), { value: ms }, text);
});

test('parseDuration refuses bare numbers, signs, unknown units and junk', () => {
  for (const text of ['', '30', '-5m', '+5m', '5 m', '5x', 'm', '1y', '7days', '1h-30m', 'NaN', '1e3s', '99999999999999999999d']) {
    const r = parseDuration(text);
    assert.ok('problem' in r, `${JSON.stringify(text)} should be refused`);
    assert.match((r as { problem: string }).problem, /is (not a duration|too long)/);
  }
});

test('formatDuration writes what parseDuration reads back', () => {
  for (const ms of [0, 1, 999, 1_000, 61_000, 5_400_000, 604_800_000, 90_061_001]) {
    const text = formatDuration(ms);
    assert.deepEqual(parseDuration(text), { value: ms }, text);
  }
  assert.equal(formatDuration(604_800_000), '7d');
  assert.equal(formatDuration(5_400_000), '1h30m');
});

test('parseTimePoint: a duration means that long before now', () => {
  const now = new Date('2024-05-01T12:00:00Z');
  assert.deepEqual(parseTimePoint('2h', now), { value: new Date('2024-05-01T10:00:00Z') });
  assert.deepEqual(parseTimePoint('7d', now), { value: new Date('2024-04-24T12:00:00Z') });
  assert.deepEqual(parseTimePoint('90s', now), { value: new Date('2024-05-01T11:58:30Z') });
});

test('parseTimePoint: ISO 8601 times, UTC unless an offset is written', () => {
  const now = new Date();
  const cases: Array<[string, string]> = [
    ['2024-05-01T12:00:00Z', '2024-05-01T12:00:00.000Z'],
    ['2024-05-01T12:00:00.123456Z', '2024-05-01T12:00:00.123Z'],
    ['2024-05-01T12:00:00', '2024-05-01T12:00:00.000Z'],
    ['2024-05-01 12:00', '2024-05-01T12:00:00.000Z'],
    ['2024-05-01', '2024-05-01T00:00:00.000Z'],
    ['2024-05-01T14:00:00+02:00', '2024-05-01T12:00:00.000Z'],
    ['2024-05-01T07:00:00-0500', '2024-05-01T12:00:00.000Z'],
    ['2024-05-01T00:30:00+01:00', '2024-04-30T23:30:00.000Z'],
  ];
  for (const [text, iso] of cases) {
    const r = parseTimePoint(text, now);
    assert.ok('value' in r, `${text}: ${JSON.stringify(r)}`);
    assert.equal(r.value.toISOString(), iso, text);
  }
});

test('parseTimePoint refuses impossible dates and words', () => {
  const now = new Date();
  for (const text of ['2024-02-30', '2024-13-01', '2024-05-01T25:00:00Z', 'yesterday', 'now', '1714564800', '2024-5-1', '']) {
    const r = parseTimePoint(text, now);
    assert.ok('problem' in r, `${JSON.stringify(text)} should be refused`);
    assert.match((r as { problem: string }).problem, /neither an ISO 8601 time/);
  }
});

test('duration and rate settings: flag text and library values are checked alike', () => {
  assert.equal(readSetting(cleanupRetention, '12h', {}), '12h');
  assert.equal(readSetting(cleanupRetention, undefined, {}), '7d');
  assert.equal(readSetting(cleanupRetention, undefined, { OUTBOX_CLEANUP_RETENTION: '30m' }), '30m');
  assert.throws(() => readSetting(cleanupRetention, '7', {}), (e: unknown) => e instanceof ConfigError && /^--retention: "7" is not a duration/.test(e.message));
  assert.throws(() => optionValue(cleanupRetention, '-1d'), (e: unknown) => e instanceof ConfigError && e.setting === 'retention');
  assert.throws(() => optionValue(cleanupRetention, '3651d'), /is not a duration from 0s to 3650d/);
  assert.equal(readSetting(replayRate, '2.5', {}), 2.5);
  assert.equal(optionValue(replayRate, undefined), 10);
  assert.throws(() => readSetting(replayRate, '-5', {}), /^ConfigError: --rate: -5 is not a number above 0/);
  assert.throws(() => readSetting(replayRate, '0', {}), /--rate: 0 is not a number above 0/);
  assert.throws(() => readSetting(replayRate, 'fast', {}), /--rate: "fast" is not a number/);
  assert.throws(() => optionValue(replayRate, Number.NaN), (e: unknown) => e instanceof ConfigError && e.setting === 'rate');
  assert.throws(() => optionValue(replayRate, 1001), /at most 1000/);
});
