import { test } from 'node:test';
import assert from 'node:assert/strict';
import { labelProblem, referenceArm, type ArmFacts } from '../../bench/armFacts.js';
import { problemWith, stampArms } from '../../bench/harness.js';
import { renderBlock, RAN_NOTES } from '../../bench/tables.js';
import type { Row } from '../../bench/report.js';
import type { RunSummary } from '../../bench/summary.js';

// Issue 33: every figure names what it ran. The bench's rows carry what the relays and
// consumers reported (bench/armFacts.ts); a row whose label names another client or
// mode than the one that ran makes its section fail, and the tables show what ran.

const arm = (role: ArmFacts['role'], client: ArmFacts['client'], delivery?: string): ArmFacts => ({
  role,
  client,
  clientVersion: client === 'kafkajs' ? '2.2.4' : '1.35.0',
  ...(delivery !== undefined && { delivery }),
  node: 'v20.20.2',
  commit: 'abcdef123456',
});
const relayKafkajs = arm('relay', 'kafkajs', 'at-least-once');
const relayPlatformatic = arm('relay', 'platformatic', 'at-least-once');
const relayExactlyOnce = arm('relay', 'kafkajs', 'exactly-once');
const row = (what: string, ran?: ArmFacts[]): Row => ({ section: '2. drain', what, value: '24,406 rows/s', load1: 1, ...(ran && { ran }) });

test('the row of 2026-12-03 06:46 is caught: labelled "defaults (producer platformatic)", its relay reported kafkajs', () => {
  const problem = labelProblem('relay, 200,000-row backlog, defaults (producer platformatic)', [relayKafkajs]);
  assert.match(problem ?? '', /names platformatic, which no arm of it ran/);
  assert.equal(labelProblem('relay, 200,000-row backlog, defaults (producer platformatic)', [relayPlatformatic]), undefined);
});

test('a label naming one client fails when another ran beside it; naming both passes; naming none passes (the table says what ran)', () => {
  assert.match(labelProblem('relay, producer kafkajs, otherwise defaults', [relayKafkajs, relayPlatformatic]) ?? '', /platformatic ran but the label names only kafkajs/);
  assert.equal(labelProblem('relay, producer kafkajs, otherwise defaults (beside it the default, platformatic)', [relayKafkajs, relayPlatformatic]), undefined);
  assert.equal(labelProblem('3. latency, 1,000 rows/s offered, relay alone: commit → Kafka ack', [relayPlatformatic]), undefined);
  assert.equal(labelProblem('raw @platformatic/kafka producer (ceiling 1 of the platformatic adapter)', [arm('raw', 'platformatic')]), undefined);
  assert.equal(labelProblem('anything', []), undefined, 'a row of no Kafka client (Postgres, Redis) has nothing to disagree with');
});

test('the delivery mode: a label saying exactly-once needs an arm that ran it, and an exactly-once arm needs a label saying so', () => {
  assert.match(labelProblem('drain, exactly-once (kafkajs)', [relayKafkajs]) ?? '', /says exactly-once, which no arm of it ran/);
  assert.match(labelProblem('drain, at-least-once (kafkajs)', [relayExactlyOnce]) ?? '', /ran exactly-once, which the label does not say/);
  assert.equal(labelProblem('drain, exactly-once (kafkajs) / at-least-once (default, platformatic)', [relayExactlyOnce, relayPlatformatic]), undefined);
});

test('exactly-once units: a label naming N units needs every exactly-once arm of it to have run N', () => {
  const two = { ...relayExactlyOnce, units: 2 };
  const eight = { ...relayExactlyOnce, units: 8 };
  assert.equal(labelProblem('drain, exactly-once (kafkajs, 2 units, interval 100 ms) / at-least-once (kafkajs)', [two, relayKafkajs]), undefined);
  assert.match(labelProblem('drain, exactly-once (kafkajs, 2 units, interval 100 ms)', [eight]) ?? '', /names 2 units, an arm ran 8/);
  assert.match(labelProblem('drain, exactly-once (kafkajs, 2 units, interval 100 ms)', [two, relayExactlyOnce]) ?? '', /names 2 units, an arm ran an unknown number of/);
});

test("the reference: a label naming Kafka's own client (kafka-clients) needs its arm, and the arm a label naming it", () => {
  const java = referenceArm('3.9.1');
  assert.equal(labelProblem("1,000 rows/s offered, Kafka's own producer (kafka-clients 3.9.1), 2 units", [java]), undefined);
  assert.match(labelProblem("1,000 rows/s offered, Kafka's own producer (kafka-clients 3.9.1), 2 units", [relayKafkajs]) ?? '', /names kafka-clients, which no arm of it ran/);
  assert.match(labelProblem('drain, at-least-once (kafkajs)', [relayKafkajs, java]) ?? '', /kafka-clients ran but the label names only kafkajs/);
});

test("the harness: a section with a mislabelled row is a problem (the run exits 1); rows without arms of their own get the section's", () => {
  const good = [row('relay, defaults (producer platformatic)', [relayPlatformatic])];
  assert.equal(problemWith({ rows: good, data: {} }), undefined);
  const bad = [row('relay, defaults (producer platformatic)', [relayKafkajs])];
  assert.match(problemWith({ rows: bad, data: {} }) ?? '', /^labelled other than it ran: "relay, defaults \(producer platformatic\)" ran relay kafkajs 2\.2\.4 at-least-once/);
  const unstamped = [row('relay, defaults (producer platformatic)'), row('share of batch time', [relayPlatformatic])];
  stampArms(unstamped, [relayKafkajs, relayKafkajs]);
  assert.deepEqual(unstamped[0]!.ran, [relayKafkajs], 'the section-wide arms, once each');
  assert.deepEqual(unstamped[1]!.ran, [relayPlatformatic], "a row's own arms are kept");
  assert.match(problemWith({ rows: unstamped, data: {} }) ?? '', /labelled other than it ran/);
});

const summary = (rows: Row[]): RunSummary => ({
  format: 1,
  name: 'outbox-relay benchmark, full profile',
  profile: 'full',
  startedAt: '2026-12-04T06:00:00.000Z',
  finishedAt: '2026-12-04T06:40:00.000Z',
  commit: { hash: 'abcdef1234567890abcdef1234567890abcdef12', dirty: false },
  sectionsSelected: ['drain'],
  sectionsCompleted: ['drain'],
  sectionProblems: {},
  machine: { cpus: 2, cpuModel: 'x', memoryGiB: 23, node: 'v20.20.2', postgres: '15.20', kafkaBrokers: ['127.0.0.1:9092'] },
  rows,
});

test('the tables name what each row ran, as reported; a run that did not record it says so, with what was found afterwards', () => {
  const recorded = renderBlock('docs', summary([row('relay, defaults (producer platformatic)', [relayPlatformatic]), { ...row('raw Postgres claim-and-mark loop'), section: '1. ceilings' }]), 'bench/committed/new.json');
  assert.ok(recorded.includes('| 2. drain | relay, defaults (producer platformatic) | 24,406 rows/s |  |  | relay platformatic 1.35.0 at-least-once | 1 |'), recorded);
  assert.ok(recorded.includes('| 1. ceilings | raw Postgres claim-and-mark loop | 24,406 rows/s |  |  | – | 1 |'));
  assert.match(recorded, /they reported Node v20\.20\.2, commit abcdef123456\./);
  const old = 'bench/committed/2026-12-03T06-46-31-049Z-full.json';
  const notRecorded = renderBlock('readme', summary([{ ...row('relay, defaults (producer platformatic)'), target: '≥ 20,000', met: true }]), old);
  assert.ok(notRecorded.includes('| 2. drain: relay, defaults (producer platformatic) | 24,406 rows/s | ≥ 20,000 | yes | not recorded |'), notRecorded);
  assert.ok(notRecorded.includes('This run did not record which client each arm ran on'));
  assert.ok(RAN_NOTES[old] && notRecorded.includes(RAN_NOTES[old]!), 'the correction found afterwards is in the table of the run it concerns');
});
