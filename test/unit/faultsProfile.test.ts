// Unit tests of the fault suite's plan and its self-check (test/faults/profiles.ts,
// selfCheck.ts, snapshot.ts): pure logic, no servers. The self-check is what keeps a fault
// run from quietly running less than its profile says (one relay instead of two, say,
// so that takeover and fencing escape the faults).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { DEFAULT_PRODUCER, PROFILES, planRuns, plantsOf } from '../faults/profiles.js';
import { CI_FAULT_COMMANDS, lanesOf, planFailures, runLanes, type CommandOutcome, type FaultCommandPlan } from '../faults/ciPlan.js';
import { emptyTally, expectedTally, FAULT_KINDS, rowsOvershoot, runsCheck, selfCheck, selfCheckFailures, type Tally } from '../faults/selfCheck.js';
import { parseChangedFiles } from '../faults/snapshot.js';
import { buildSchedule } from '../faults/schedule.js';
import { PoolerTally, type Backend } from '../faults/sightings.js';

const ci = PROFILES.ci!;

/** What a faithful ci run counts. */
function faithful(): Tally {
  const t = expectedTally(ci);
  return { ...t, faults: { ...t.faults } };
}

test('profiles: ci runs several relays, and every run of `test:faults` keeps them', () => {
  assert.ok(ci.relays >= 2, 'takeover and fencing need at least two relays');
  const runs = planRuns({ profile: 'ci', seed: 7, plant: 'none', verifyPlanted: true });
  assert.deepEqual(
    runs.map((r) => r.name),
    ['ci-7', 'ci-7-dedup-off', 'ci-7-horizon-off'],
  );
  for (const r of runs) assert.equal(r.profile.relays, ci.relays, r.name);
  assert.equal(expectedTally(runs[0]!.profile).relays, ci.relays);
  assert.equal(expectedTally(runs[0]!.profile).faults['relay-pause'], ci.counts.relayPauses);
  assert.equal(runs[1]!.command, 'npx tsx test/faults/run.ts --profile ci --seed 7 --plant dedup-off');
});

test('profiles: --relays and --rows override the profile; a lone planted run keeps --rows', () => {
  const [normal] = planRuns({ profile: 'ci', seed: 1, relays: 3, rows: 100, plant: 'none', verifyPlanted: false });
  assert.equal(normal!.profile.relays, 3);
  assert.equal(normal!.profile.rows, 100);
  assert.equal(expectedTally(normal!.profile).relays, 3);
  const lone = planRuns({ profile: 'ci', seed: 1, rows: 100, plant: 'horizon-off', verifyPlanted: false });
  assert.equal(lone.length, 1);
  assert.equal(lone[0]!.profile.rows, 100);
  assert.equal(lone[0]!.profile.counts.relayKills, 0);
  assert.match(lone[0]!.command, /--plant horizon-off --rows 100$/);
});

test('self-check: a run that ran what its profile says passes', () => {
  const lines = selfCheck(expectedTally(ci), faithful());
  assert.deepEqual(selfCheckFailures(lines), []);
  assert.ok(lines.every((l) => l.ok));
  assert.equal(lines.length, 15 + FAULT_KINDS.length);
});

test('self-check: exactly-once relays under two transactional-id prefixes fail the run (finding 6)', () => {
  const eos = planRuns({ profile: 'eos-cluster-ci', seed: 5, plant: 'none', verifyPlanted: false })[0]!.profile;
  const expected = expectedTally(eos);
  assert.equal(expected.transactionalIdPrefixes, 1);
  const actual = { ...expected, faults: { ...expected.faults } };
  assert.deepEqual(selfCheckFailures(selfCheck(expected, actual)), []);
  actual.transactionalIdPrefixes = 2;
  assert.match(selfCheckFailures(selfCheck(expected, actual)).join('\n'), /transactional-id prefixes of the relays 2 of 1/);
});

test('self-check: one relay where the profile says two fails the run', () => {
  const actual = faithful();
  actual.relays = 1;
  actual.relaysLiveAtOnce = 1;
  const failures = selfCheckFailures(selfCheck(expectedTally(ci), actual));
  assert.deepEqual(failures, ['self-check: relays 1 of 2', 'self-check: relays live at once 1 of 2']);
});

test('self-check: a run in which no relay claimed a batch ahead fails; one or more relays that did pass', () => {
  const expected = expectedTally(ci);
  assert.equal(expected.relaysClaimingAhead, 1);
  assert.deepEqual(selfCheckFailures(selfCheck(expected, { ...faithful(), relaysClaimingAhead: 0 })), ['self-check: relays that claimed a batch ahead (at least) 0 of 1']);
  assert.deepEqual(selfCheckFailures(selfCheck(expected, { ...faithful(), relaysClaimingAhead: ci.relays })), []);
});

test('self-check: a missing consumer, broker or fault of any kind fails the run; so does one too many', () => {
  for (const field of ['consumers', 'brokers', 'outboxes'] as const) {
    const actual = faithful();
    actual[field] -= 1;
    assert.equal(selfCheckFailures(selfCheck(expectedTally(ci), actual)).length, 1, field);
  }
  for (const { kind } of FAULT_KINDS) {
    const fewer = faithful();
    fewer.faults[kind] -= 1;
    assert.deepEqual(selfCheckFailures(selfCheck(expectedTally(ci), fewer)), [`self-check: fault ${kind} ${(ci.counts[FAULT_KINDS.find((k) => k.kind === kind)!.count] ?? 0) - 1} of ${expectedTally(ci).faults[kind]}`]);
    const more = faithful();
    more.faults[kind] += 1;
    assert.equal(selfCheckFailures(selfCheck(expectedTally(ci), more)).length, 1, kind);
  }
  // Nothing ran at all: every line fails except the fault kinds the profile has none of.
  const nothing = selfCheckFailures(selfCheck(expectedTally(ci), emptyTally()));
  assert.equal(nothing.length, 8 + FAULT_KINDS.filter(({ count }) => (ci.counts[count] ?? 0) > 0).length);
});

test('self-check: the rows the writers committed are checked against the profile: fewer fail the run, the last transactions overshoot it by less than a transaction', () => {
  const expected = expectedTally(ci);
  assert.equal(expected.rowsCommitted, ci.rows);
  const overshoot = rowsOvershoot(ci);
  assert.equal(overshoot, ci.maxRowsPerTransaction - 1);
  const withRows = (n: number): string[] => selfCheckFailures(selfCheck(expected, { ...faithful(), rowsCommitted: n }, {}, overshoot));
  assert.deepEqual(withRows(ci.rows), []);
  assert.deepEqual(withRows(ci.rows + overshoot), []);
  assert.deepEqual(withRows(ci.rows - 1), [`self-check: rows committed by the writers ${ci.rows - 1} of ${ci.rows}`]);
  assert.deepEqual(withRows(ci.rows + overshoot + 1), [`self-check: rows committed by the writers ${ci.rows + overshoot + 1} of ${ci.rows}`]);
  // Two outboxes share the rows out (each its own writers, each its own overshoot).
  const multi = { ...ci, rows: 4_001, outboxes: 2 };
  assert.equal(expectedTally(multi).rowsCommitted, 4_002);
  assert.equal(rowsOvershoot(multi), 2 * (ci.maxRowsPerTransaction - 1));
});

test('self-check: --verify-planted that completed fewer planted cases than listed fails', () => {
  const runs = planRuns({ profile: 'ci', seed: 7, plant: 'none', verifyPlanted: true });
  const all = runsCheck(runs, ['ci-7', 'ci-7-dedup-off', 'ci-7-horizon-off'], true);
  assert.deepEqual(selfCheckFailures(all), []);
  assert.deepEqual(
    all.map((l) => [l.what, l.actual, l.expected]),
    [
      ['runs', 3, 3],
      ['planted cases', 2, 2],
    ],
  );
  assert.deepEqual(selfCheckFailures(runsCheck(runs, ['ci-7', 'ci-7-dedup-off'], true)), ['self-check: runs 2 of 3', 'self-check: planted cases 1 of 2']);
  // A plan that left a planted case out is caught too.
  const short = runs.filter((r) => r.plant !== 'horizon-off');
  assert.deepEqual(selfCheckFailures(runsCheck(short, ['ci-7', 'ci-7-dedup-off'], true)), ['self-check: planted cases 1 of 2']);
  // Without --verify-planted only the runs count.
  const lone = planRuns({ profile: 'ci', seed: 7, plant: 'none', verifyPlanted: false });
  assert.deepEqual(selfCheckFailures(runsCheck(lone, ['ci-7'], false)), []);
  assert.deepEqual(selfCheckFailures(runsCheck(lone, [], false)), ['self-check: runs 0 of 1']);
});

test('snapshot: changed src/ and sql/ files are listed at any depth, renames with both paths', () => {
  const porcelain = [' M src/relay/relay.ts', 'R  src/consumer/consumer.ts', 'src/consumer.ts', '?? src/metrics/sql/new.ts', 'A  sql/005_x.sql', ''].join('\0');
  assert.deepEqual(parseChangedFiles(porcelain), [' M src/relay/relay.ts', 'R  src/consumer.ts -> src/consumer/consumer.ts', '?? src/metrics/sql/new.ts', 'A  sql/005_x.sql']);
  assert.deepEqual(parseChangedFiles(''), []);
});

test('profiles: the cluster profiles run on 3 brokers, kill leaders and other nodes one at a time, and the self-check counts both', async () => {
  const { buildSchedule } = await import('../faults/schedule.js');
  for (const name of ['cluster', 'cluster-ci']) {
    const p = PROFILES[name]!;
    assert.equal(p.brokers, 3, name);
    assert.ok(p.relays >= 2 && p.consumers >= 2, `${name}: two or more relays and consumers`);
    assert.ok(p.counts.leaderKills > 0 && p.counts.brokerKills > 0, name);
    const t = expectedTally(p);
    assert.equal(t.brokers, 3);
    assert.equal(t.faults['leader-kill'], p.counts.leaderKills);
    assert.equal(t.faults['broker-kill'], p.counts.brokerKills);
    // A single broker, or one leader kill fewer, fails the run.
    assert.deepEqual(selfCheckFailures(selfCheck(t, { ...t, brokers: 1 })), ['self-check: Kafka brokers 1 of 3']);
    const fewer = { ...t, faults: { ...t.faults, 'leader-kill': t.faults['leader-kill'] - 1 } };
    assert.deepEqual(selfCheckFailures(selfCheck(t, fewer)), [`self-check: fault leader-kill ${p.counts.leaderKills - 1} of ${p.counts.leaderKills}`]);
    const faults = buildSchedule({ seed: 3, counts: p.counts, startMs: 3_000, endMs: p.writeMs - 3_000, relays: p.relays, consumers: p.consumers, leaseTtlMs: p.leaseTtlMs, brokers: p.brokers, partitions: p.partitions });
    const kills = faults.filter((f) => f.kind === 'broker-kill' || f.kind === 'leader-kill');
    assert.equal(kills.length, p.counts.brokerKills + p.counts.leaderKills);
    for (const f of kills) {
      if (f.kind === 'broker-kill') assert.ok(f.node >= 1 && f.node <= 3);
      if (f.kind === 'leader-kill') assert.ok(f.partition >= 0 && f.partition < p.partitions);
    }
  }
  // The single-broker profiles schedule no broker kills: their seeds still give the same schedule.
  assert.equal(ci.counts.brokerKills + ci.counts.leaderKills, 0);
});

test('profiles: multi-ci serves two outboxes from every relay and cuts the database of the second off; the self-check counts both', () => {
  const p = PROFILES['multi-ci']!;
  assert.equal(p.outboxes, 2);
  assert.ok(p.relays >= 2);
  const t = expectedTally(p);
  assert.equal(t.outboxes, 2);
  assert.equal(t.faults['database-cut'], p.counts.databaseCuts);
  const faults = buildSchedule({ seed: 5, counts: p.counts, startMs: 3_000, endMs: p.writeMs - 3_000, relays: p.relays, consumers: p.consumers, leaseTtlMs: p.leaseTtlMs, outboxes: p.outboxes });
  const cuts = faults.filter((f) => f.kind === 'database-cut');
  assert.equal(cuts.length, p.counts.databaseCuts);
  for (const c of cuts) assert.equal(c.kind === 'database-cut' && c.outbox, 1, 'never the first outbox (it holds the tables of the consumers)');
  const oneOutbox = { ...t, faults: { ...t.faults }, outboxes: 1 };
  assert.deepEqual(selfCheckFailures(selfCheck(t, oneOutbox)), ['self-check: outboxes relayed by every relay 1 of 2']);
  // Single-outbox profiles expect one outbox and no cuts.
  assert.equal(expectedTally(ci).outboxes, 1);
  assert.equal(expectedTally(ci).faults['database-cut'], 0);
});

test('profiles: pooler-ci runs 2 relays and 2 consumers through PgBouncer in transaction pooling, restarts PgBouncer both ways and Postgres behind it; the planted runs go through it too', () => {
  const p = PROFILES['pooler-ci']!;
  assert.equal(p.pooler, 'transaction');
  assert.ok(p.relays >= 2 && p.consumers >= 2);
  assert.ok((p.counts.pgbouncerRestarts ?? 0) >= 2 && p.counts.postgresRestarts >= 1 && p.counts.relayKills > 0 && p.counts.consumerKills > 0);
  const t = expectedTally(p);
  assert.equal(t.relaysThroughPooler, p.relays);
  assert.equal(t.consumersThroughPooler, p.consumers);
  assert.equal(t.directBackends, 0);
  assert.equal(t.faults['pgbouncer-restart'], p.counts.pgbouncerRestarts);
  const faults = buildSchedule({ seed: 9, counts: p.counts, startMs: 3_000, endMs: p.writeMs - 3_000, relays: p.relays, consumers: p.consumers, leaseTtlMs: p.leaseTtlMs });
  assert.deepEqual(faults.filter((f) => f.kind === 'pgbouncer-restart').map((f) => f.kind === 'pgbouncer-restart' && f.mode).sort(), ['clean', 'kill']);
  // The single-path profiles expect nothing through a pooler, and their schedules do not move.
  assert.equal(expectedTally(ci).relaysThroughPooler, 0);
  const options = { seed: 9, startMs: 3_000, endMs: 40_000, relays: 2, consumers: 2, leaseTtlMs: 2_500 };
  assert.deepEqual(buildSchedule({ ...options, counts: ci.counts }), buildSchedule({ ...options, counts: { ...ci.counts, pgbouncerRestarts: 0 } }));
  for (const run of planRuns({ profile: 'pooler-ci', seed: 9, plant: 'none', verifyPlanted: true })) assert.equal(run.profile.pooler, 'transaction', run.name);
});

test('self-check: behind PgBouncer, a relay or consumer never seen as its client, or a backend connected around it, fails the run', () => {
  const p = PROFILES['pooler-ci']!;
  const t = expectedTally(p);
  assert.deepEqual(selfCheckFailures(selfCheck(t, { ...t, faults: { ...t.faults } })), []);
  assert.deepEqual(selfCheckFailures(selfCheck(t, { ...t, relaysThroughPooler: 1 })), ['self-check: relays through PgBouncer in transaction pooling 1 of 2']);
  assert.deepEqual(selfCheckFailures(selfCheck(t, { ...t, consumersThroughPooler: 0 })), ['self-check: consumers through PgBouncer in transaction pooling 0 of 2']);
  assert.deepEqual(selfCheckFailures(selfCheck(t, { ...t, directBackends: 3 })), ['self-check: backends connected around PgBouncer 3 of 0']);
});

test('pooler sightings: clients count in transaction pools only; a backend that is none of PgBouncer\'s server connections counts once seen so twice in a row', () => {
  const tally = new PoolerTally([
    { name: 'relay 0', applicationName: 'faults-relay-0' },
    { name: 'relay 1', applicationName: 'faults-relay-1' },
    { name: 'consumer-0', applicationName: 'faults-consumer-0' },
  ]);
  const pools = [
    { database: 'postgres', user: 'postgres', pool_mode: 'transaction' },
    { database: 'other', user: 'postgres', pool_mode: 'session' },
  ];
  const clients = [
    { database: 'postgres', user: 'postgres', application_name: 'faults-relay-0:abc' },
    { database: 'postgres', user: 'postgres', application_name: 'faults-relay-10:abc' }, // not relay 1
    { database: 'other', user: 'postgres', application_name: 'faults-consumer-0:x' },
  ];
  const backend = (pid: number, app: string): Backend => ({ pid, backend_start: `t${pid}`, application_name: app, client_port: 40_000 + pid });
  const viaBouncer = backend(1, 'faults-relay-0:abc');
  const around = backend(2, 'faults-writer-3');
  const closing = backend(3, 'faults-relay-0:abc');
  const servers = [{ remote_pid: '1' }];
  tally.record({ before: [viaBouncer, around, closing], pools, clients, servers, after: [viaBouncer, around] });
  assert.deepEqual(tally.seenInTransactionPools(['relay 0', 'relay 1', 'consumer-0']), ['relay 0']);
  assert.deepEqual([...tally.otherModes.get('consumer-0')!], ['session']);
  assert.equal(tally.direct.size, 0, 'once is not enough: PgBouncer may have been closing it');
  // A missed sample starts the count again.
  tally.missed();
  tally.record({ before: [viaBouncer, around], pools, clients: [], servers, after: [viaBouncer, around] });
  assert.equal(tally.direct.size, 0);
  tally.record({ before: [viaBouncer, around], pools, clients: [], servers, after: [viaBouncer, around] });
  assert.deepEqual([...tally.direct.values()], ['faults-writer-3 (pid 2, client port 40002)']);
  assert.equal(tally.backendsSeen.size, 3);
  assert.equal(tally.samples, 3);
});

test('profiles: eos-cluster-ci relays exactly once through kafkajs on the 3-node cluster, kills relays at a Kafka commit, and plants the missing progress check', () => {
  const runs = planRuns({ profile: 'eos-cluster-ci', seed: 5, plant: 'none', verifyPlanted: true });
  assert.deepEqual(runs.map((r) => r.plant), ['none', 'progress-off']);
  for (const r of runs) {
    assert.equal(r.profile.delivery, 'exactly-once', r.name);
    assert.equal(r.profile.brokers, 3, r.name);
    assert.equal(r.producer, DEFAULT_PRODUCER, `${r.name}: the product's default client, as for every profile`);
  }
  assert.deepEqual(plantsOf(PROFILES.ci!), ['dedup-off', 'horizon-off']);
  const [kafkajs] = planRuns({ profile: 'eos-cluster-ci', seed: 5, plant: 'none', verifyPlanted: false, producer: 'kafkajs' });
  assert.equal(kafkajs!.producer, 'kafkajs');
  assert.match(kafkajs!.command, / --producer kafkajs$/);
  const kills = buildSchedule({ seed: 5, counts: runs[0]!.profile.counts, startMs: 0, endMs: 40_000, relays: 2, consumers: 2, leaseTtlMs: 2_500, brokers: 3, partitions: 6, relayKillsAfterKafkaCommit: true }).filter((f) => f.kind === 'relay-kill');
  assert.equal(kills.filter((f) => f.kind === 'relay-kill' && f.moment === 'after-kafka-commit').length, Math.ceil(kills.length / 2));
});

test('profiles: eos-cluster-ci restarts Postgres both ways and eos-stall also stalls a relay with its Kafka transaction open past the timeout; the self-check fails a run where either did not happen', () => {
  const [ci] = planRuns({ profile: 'eos-cluster-ci', seed: 5, plant: 'none', verifyPlanted: true });
  assert.equal(ci!.profile.counts.postgresRestarts, 2);
  const [run, planted] = planRuns({ profile: 'eos-stall', seed: 5, plant: 'none', verifyPlanted: true });
  const p = run!.profile;
  assert.equal(p.counts.postgresRestarts, 2);
  assert.equal(p.counts.relayStalls, 1);
  // The stall outlasts the timeout and the coordinator's 500 ms check for timed-out transactions.
  assert.ok(p.transactionTimeoutMs !== undefined && p.relayStallMs !== undefined && p.relayStallMs >= p.transactionTimeoutMs + 500 + 1_000, `${p.relayStallMs} vs ${p.transactionTimeoutMs}`);
  assert.equal(planted!.profile.counts.relayStalls ?? 0, 0);
  for (const [profile, stalls] of [[p, 1]] as const) {
    for (const seed of [1, 5, 101, 202]) {
      const faults = buildSchedule({ seed, counts: profile.counts, startMs: 3_000, endMs: 37_000, relays: 2, consumers: 2, leaseTtlMs: 2_500, brokers: 3, partitions: 6, relayKillsAfterKafkaCommit: true });
      assert.equal(faults.filter((f) => f.kind === 'relay-stall').length, stalls, `seed ${seed}`);
      assert.deepEqual(faults.filter((f) => f.kind === 'postgres-restart').map((f) => f.kind === 'postgres-restart' && f.mode).sort(), ['fast', 'immediate'], `seed ${seed}`);
    }
  }
  // What the harness counted when a stall or a restart did not take effect.
  const expected = expectedTally(p);
  for (const kind of ['relay-stall', 'postgres-restart'] as const) {
    const actual = { ...expected, faults: { ...expected.faults, [kind]: expected.faults[kind] - 1 } };
    const failures = selfCheckFailures(selfCheck(expected, actual));
    assert.deepEqual(failures, [`self-check: fault ${kind} ${expected.faults[kind] - 1} of ${expected.faults[kind]}`]);
  }
});

test('CI fault plan: the seven commands test:faults runs, in two lanes, the 3-node clusters in different lanes', () => {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
  assert.equal(pkg.scripts['test:faults'], 'tsx test/faults/ci.ts');
  const byArgs = CI_FAULT_COMMANDS.map((c) => c.args.join(' ')).sort();
  assert.deepEqual(byArgs, [
    '--profile ci --producer kafkajs',
    '--profile ci --verify-planted',
    '--profile cluster-ci',
    '--profile eos-cluster-ci --verify-planted',
    '--profile multi-ci',
    '--profile pooler-ci',
    '--profile tenants-ci',
  ]);
  // Every run (profile and planted): 3 + 1 + 1 + 2 + 1 + 1 + 1.
  const runs = CI_FAULT_COMMANDS.flatMap((c) => {
    const at = (flag: string): string | undefined => c.args[c.args.indexOf(flag) + 1];
    return planRuns({ profile: at('--profile')!, seed: 1, plant: 'none', verifyPlanted: c.args.includes('--verify-planted'), ...(c.args.includes('--producer') ? { producer: at('--producer') as 'kafkajs' } : {}) });
  });
  assert.equal(runs.length, 10);
  const lanes = lanesOf(CI_FAULT_COMMANDS, 2);
  assert.equal(lanes.length, 2);
  const clusterLanes = lanes.map((l) => l.filter((c) => PROFILES[c.args[1]!]!.brokers > 1).length);
  assert.deepEqual(clusterLanes, [1, 1], 'one 3-node cluster profile per lane');
  assert.equal(lanesOf(CI_FAULT_COMMANDS, 1)[0]!.length, 7);
  assert.throws(() => lanesOf(CI_FAULT_COMMANDS, 3), /takes 1 or 2/);
  assert.throws(() => lanesOf(CI_FAULT_COMMANDS, 0), /whole number/);
});

test('CI fault plan: the run fails when a planned command failed, did not run, ran twice, or one outside the plan ran', () => {
  const plan: FaultCommandPlan[] = [{ lane: 1, args: ['--profile', 'ci'] }, { lane: 2, args: ['--profile', 'multi-ci'] }];
  const ok = (args: string[]): CommandOutcome => ({ args, code: 0, seconds: 1 });
  assert.deepEqual(planFailures(plan, [ok(['--profile', 'ci']), ok(['--profile', 'multi-ci'])]), []);
  assert.deepEqual(planFailures(plan, [ok(['--profile', 'ci'])]), ['faults: planned command did not run: --profile multi-ci']);
  assert.deepEqual(planFailures(plan, [ok(['--profile', 'ci']), { args: ['--profile', 'multi-ci'], code: 1, seconds: 1 }]), ['faults: failed (exit 1): --profile multi-ci']);
  assert.deepEqual(planFailures(plan, [ok(['--profile', 'ci']), { args: ['--profile', 'multi-ci'], code: null, seconds: 1 }]), ['faults: failed (exit signal): --profile multi-ci']);
  assert.deepEqual(planFailures(plan, [ok(['--profile', 'ci']), ok(['--profile', 'ci']), ok(['--profile', 'multi-ci'])]), ['faults: planned command ran 2 times: --profile ci']);
  assert.deepEqual(planFailures(plan, [ok(['--profile', 'ci']), ok(['--profile', 'multi-ci']), ok(['--profile', 'smoke'])]), ['faults: ran a command outside the plan: --profile smoke']);
});

test('CI fault plan: the lanes run at once; a failed command does not end its lane; after a stop no command starts', async () => {
  const lanes = lanesOf(CI_FAULT_COMMANDS, 2);
  const started: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  // Each lane's first command waits until both lanes have started one: only lanes run at once get past it.
  const run = async (c: FaultCommandPlan): Promise<CommandOutcome> => {
    started.push(c.args.join(' '));
    if (started.length === 2) release();
    await gate;
    return { args: c.args, code: c.args.includes('cluster-ci') ? 1 : 0, seconds: 1 };
  };
  const outcomes = await runLanes(lanes, run, () => false);
  assert.equal(outcomes.length, 7, 'every command ran, the failed cluster-ci notwithstanding');
  assert.deepEqual(planFailures(CI_FAULT_COMMANDS, outcomes), ['faults: failed (exit 1): --profile cluster-ci']);
  let calls = 0;
  const stopAfterFirst = await runLanes(lanes, async (c) => ({ args: c.args, code: 0, seconds: 0 }), () => calls++ >= 2);
  assert.equal(stopAfterFirst.length, 2, 'one command per lane, then the stop');
  assert.match(planFailures(CI_FAULT_COMMANDS, stopAfterFirst).join('\n'), /planned command did not run/);
});
