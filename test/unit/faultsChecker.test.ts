// Unit tests of the fault suite's checker (test/faults/checker.ts, and tenantChecker.ts for
// the tenant profiles) and its schedule: small hand-made inputs, no servers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { check, violations, type CheckInput, type Delivered, type EffectRow, type OutboxRow } from '../faults/checker.js';
import { buildSchedule, mulberry32 } from '../faults/schedule.js';
import { PROFILES } from '../faults/profiles.js';
import { checkTenants, tenantViolations, type TenantMessage, type TenantOrigin } from '../faults/tenantChecker.js';
import { planTenants } from '../faults/tenantDatabases.js';

const row = (messageId: string, outboxId: number, key: string, sent = true): OutboxRow => ({ messageId, outboxId, key, sent });
const wire = (partition: number, offset: number, key: string, messageId: string, outboxId: number): Delivered => ({ partition, offset, key, messageId, outboxId });
let seq = 0;
const effect = (messageId: string, key: string, outboxId: number, consumer = 'c0'): EffectRow => ({ seq: ++seq, messageId, key, outboxId, consumer });

/** A clean run: three rows of two keys, each delivered and applied once, in order. */
function clean(): CheckInput {
  return {
    outbox: [row('a1', 1, 'a'), row('b2', 2, 'b'), row('a3', 3, 'a')],
    delivered: [wire(0, 0, 'a', 'a1', 1), wire(1, 0, 'b', 'b2', 2), wire(0, 1, 'a', 'a3', 3)],
    effects: [effect('a1', 'a', 1), effect('b2', 'b', 2), effect('a3', 'a', 3)],
    writers: { committed: ['a1', 'b2', 'a3'], rolledBack: ['x9'], unknown: [] },
  };
}

test('checker: a clean run has no violations', () => {
  const r = check(clean());
  assert.deepEqual(violations(r), []);
  assert.equal(r.committedRows, 3);
  assert.equal(r.deliveredDistinct, 3);
  assert.equal(r.rolledBackRows, 1);
});

test('checker: a committed row never delivered is lost, and its effect is missing', () => {
  const input = clean();
  input.delivered = input.delivered.filter((m) => m.messageId !== 'b2');
  input.effects = input.effects.filter((e) => e.messageId !== 'b2');
  const r = check(input);
  assert.equal(r.lost, 1);
  assert.equal(r.missingEffects, 1);
  assert.deepEqual(r.examples.lost?.map((e) => e.messageId), ['b2']);
  assert.deepEqual(violations(r), ['lost=1', 'missingEffects=1']);
});

test('checker: a wire duplicate is not a violation; a second effect is', () => {
  const input = clean();
  input.delivered = [...input.delivered, wire(0, 2, 'a', 'a1', 1)];
  let r = check(input);
  assert.equal(r.wireDuplicates, 1);
  assert.equal(r.reorderings, 0, 'a re-sent duplicate after a later event is not a reordering');
  assert.deepEqual(violations(r), []);
  input.effects = [...input.effects, effect('a1', 'a', 1, 'c1')];
  r = check(input);
  assert.equal(r.duplicateEffects, 1);
  assert.deepEqual(violations(r), ['duplicateEffects=1']);
});

test('checker: a message first delivered after a higher outbox id of its key is a reordering', () => {
  const input = clean();
  // a3 reaches partition 0 before a1.
  input.delivered = [wire(0, 0, 'a', 'a3', 3), wire(1, 0, 'b', 'b2', 2), wire(0, 1, 'a', 'a1', 1)];
  const r = check(input);
  assert.equal(r.reorderings, 1);
  assert.equal(r.examples.reorderings?.[0]?.messageId, 'a1');
  assert.deepEqual(violations(r), ['reorderings=1']);
});

test('checker: order is judged by offset, not by the order messages were read in', () => {
  const input = clean();
  input.delivered = [...input.delivered].reverse();
  assert.equal(check(input).reorderings, 0);
});

test('checker: other keys interleaving is not a reordering', () => {
  const input: CheckInput = {
    outbox: [row('a1', 1, 'a'), row('b5', 5, 'b'), row('a7', 7, 'a'), row('b6', 6, 'b')],
    delivered: [wire(0, 0, 'b', 'b5', 5), wire(0, 1, 'a', 'a1', 1), wire(0, 2, 'b', 'b6', 6), wire(0, 3, 'a', 'a7', 7)],
    effects: [effect('b5', 'b', 5), effect('a1', 'a', 1), effect('b6', 'b', 6), effect('a7', 'a', 7)],
    writers: { committed: ['a1', 'b5', 'a7', 'b6'], rolledBack: [], unknown: [] },
  };
  assert.deepEqual(violations(check(input)), []);
});

test('checker: a rolled-back row on the wire is reported', () => {
  const input = clean();
  input.delivered = [...input.delivered, wire(0, 2, 'a', 'x9', 4)];
  const r = check(input);
  assert.equal(r.rolledBackDelivered, 1);
  assert.deepEqual(violations(r), ['rolledBackDelivered=1']);
});

test('checker: unknown-outcome rows are judged by the outbox table', () => {
  const input = clean();
  // u1's COMMIT lost its connection but did commit; u2's did not.
  input.writers.unknown = ['u1', 'u2'];
  input.outbox = [...input.outbox, row('u1', 4, 'a')];
  input.delivered = [...input.delivered, wire(0, 2, 'a', 'u1', 4)];
  input.effects = [...input.effects, effect('u1', 'a', 4)];
  let r = check(input);
  assert.equal(r.unknownCommitted, 1);
  assert.equal(r.unknownAbsent, 1);
  assert.deepEqual(violations(r), []);
  // An absent one delivered is a rolled-back row delivered.
  input.delivered = [...input.delivered, wire(1, 1, 'b', 'u2', 5)];
  r = check(input);
  assert.equal(r.rolledBackDelivered, 1);
});

test('checker: a row the writer saw commit but the table lacks is reported', () => {
  const input = clean();
  input.writers.committed = [...input.writers.committed, 'gone'];
  assert.deepEqual(violations(check(input)), ['committedMissingInDb=1']);
});

test('checker: a key found in two partitions and a message without headers are reported', () => {
  const input = clean();
  input.delivered = [...input.delivered, wire(1, 1, 'a', 'a3', 3), { partition: 1, offset: 2, key: 'b', messageId: undefined, outboxId: undefined }];
  const r = check(input);
  assert.equal(r.keysSplit, 1);
  assert.equal(r.malformed, 1);
});

test('checker: effects applied out of order are counted, for information only', () => {
  const input = clean();
  input.effects = [effect('a3', 'a', 3), effect('b2', 'b', 2), effect('a1', 'a', 1)];
  const r = check(input);
  assert.equal(r.effectReorderings, 1);
  assert.deepEqual(violations(r), []);
});

test('schedule: the same seed gives the same faults; counts and bounds hold', () => {
  const options = {
    seed: 42,
    counts: { relayKills: 20, relayPauses: 5, brokerRestarts: 3, postgresRestarts: 2, consumerKills: 10, consumerJoins: 4, brokerKills: 0, leaderKills: 0 },
    startMs: 3_000,
    endMs: 300_000,
    relays: 3,
    consumers: 2,
    leaseTtlMs: 2_500,
  };
  const a = buildSchedule(options);
  assert.deepEqual(buildSchedule(options), a);
  assert.notDeepEqual(buildSchedule({ ...options, seed: 43 }), a);
  const count = (kind: string): number => a.filter((f) => f.kind === kind).length;
  assert.equal(count('relay-kill'), 20);
  assert.equal(count('relay-pause'), 5);
  assert.equal(count('broker-restart'), 3);
  assert.equal(count('postgres-restart'), 2);
  assert.equal(count('consumer-kill'), 10);
  assert.equal(count('consumer-join'), 4);
  for (const f of a) {
    assert.ok(f.atMs >= options.startMs && f.atMs <= options.endMs, `${f.kind} at ${f.atMs}`);
    if (f.kind === 'relay-pause') assert.ok(f.pauseMs > options.leaseTtlMs, 'a pause outlasts the lease');
    if (f.kind === 'relay-kill') assert.ok(f.relay >= 0 && f.relay < 3);
  }
  assert.deepEqual(
    a.filter((f) => f.kind === 'postgres-restart').map((f) => (f as { mode: string }).mode).sort(),
    ['fast', 'immediate'],
    'both a crash and a clean restart',
  );
  const sorted = [...a].sort((x, y) => x.atMs - y.atMs);
  assert.deepEqual(a, sorted);
});

test('schedule: mulberry32 is deterministic and in [0, 1)', () => {
  const r1 = mulberry32(7);
  const r2 = mulberry32(7);
  for (let i = 0; i < 1000; i++) {
    const x = r1();
    assert.equal(x, r2());
    assert.ok(x >= 0 && x < 1);
  }
});

/** Two tenants, ta (keys a-…) and tb (keys b-…), each on its own topic; a clean delivery of both. */
function twoTenants(): { tenants: TenantOrigin[]; clean: TenantMessage[] } {
  const tenant = (name: string, prefix: string, rows: OutboxRow[]): TenantOrigin => ({
    tenant: name,
    topic: `${name}.orders`,
    keyPrefix: prefix,
    outbox: rows,
    writers: { committed: rows.map((r) => r.messageId), rolledBack: [], unknown: [] },
  });
  const on = (topic: string, offset: number, key: string, messageId: string, outboxId: number, tenantHeader: string): TenantMessage => ({ topic, ...wire(0, offset, key, messageId, outboxId), tenant: tenantHeader });
  return {
    // Each tenant's ids start at 1: the outbox ids of two tenants are not comparable.
    tenants: [tenant('ta', 'a-', [row('a1', 1, 'a-k'), row('a2', 2, 'a-k')]), tenant('tb', 'b-', [row('b1', 1, 'b-k')])],
    clean: [on('ta.orders', 0, 'a-k', 'a1', 1, 'ta'), on('ta.orders', 1, 'a-k', 'a2', 2, 'ta'), on('tb.orders', 0, 'b-k', 'b1', 1, 'tb')],
  };
}

test('tenant checker: every tenant judged on its own topic; a clean run has no violations', () => {
  const { tenants, clean } = twoTenants();
  const r = checkTenants(tenants, clean);
  assert.equal(r.wrongTenant, 0);
  assert.deepEqual(tenantViolations(r), []);
  assert.equal(r.merged.committedRows, 3);
  assert.equal(r.perTenant.ta?.deliveredDistinct, 2);
  assert.equal(r.merged.missingEffects, 0, 'no consumers: no effects are missing');
});

test("tenant checker: a row of tenant A on tenant B's topic fails the run (wrongTenant), and is lost for A", () => {
  const { tenants, clean } = twoTenants();
  // a2 went out on tb's topic, its header and key still ta's.
  const misrouted = [clean[0]!, clean[2]!, { ...clean[1]!, topic: 'tb.orders', offset: 1 }];
  const r = checkTenants(tenants, misrouted);
  assert.equal(r.wrongTenant, 1);
  assert.match(r.wrongTenantExamples[0]?.detail ?? '', /a row of tenant ta on tenant tb's topic/);
  assert.equal(r.perTenant.ta?.lost, 1);
  assert.deepEqual(tenantViolations(r), ['lost=1', 'malformed=1', 'wrongTenant=1']);
});

test("tenant checker: another tenant's name in the header, another tenant's key, or a topic of no tenant is a wrong tenant too", () => {
  const { tenants, clean } = twoTenants();
  const header = checkTenants(tenants, [clean[0]!, clean[1]!, { ...clean[2]!, tenant: 'ta' }]);
  assert.equal(header.wrongTenant, 1);
  assert.match(header.wrongTenantExamples[0]?.detail ?? '', /header outbox-tenant "ta" on tenant tb's topic/);
  assert.deepEqual(tenantViolations(header), ['wrongTenant=1']);
  const key = checkTenants(tenants, [clean[0]!, clean[1]!, { ...clean[2]!, key: 'a-k' }]);
  assert.equal(key.wrongTenant, 1);
  assert.match(key.wrongTenantExamples[0]?.detail ?? '', /key a-k is not one of tenant tb's/);
  const stray = checkTenants(tenants, [...clean, { ...clean[0]!, topic: 'tc.orders' }]);
  assert.equal(stray.wrongTenant, 1);
  assert.match(stray.wrongTenantExamples[0]?.detail ?? '', /on topic tc.orders, which is no tenant's/);
});

test('schedule: tenants-ci adds a tenant after the first ones and drops the last of them; cuts fall on neither, nor on tenant 0 (the rule\'s database)', () => {
  const p = PROFILES['tenants-ci']!;
  const setup = p.tenants!;
  for (const seed of [1, 2, 3, 11, 99]) {
    const faults = buildSchedule({ seed, counts: p.counts, startMs: 3_000, endMs: p.writeMs - 3_000, relays: p.relays, consumers: p.consumers, leaseTtlMs: p.leaseTtlMs, outboxes: setup.initial - (p.counts.tenantDrops ?? 0), tenants: setup.initial });
    const add = faults.find((f) => f.kind === 'tenant-add');
    const drop = faults.find((f) => f.kind === 'tenant-drop');
    assert.equal(add?.kind === 'tenant-add' && add.tenant, setup.initial);
    assert.equal(drop?.kind === 'tenant-drop' && drop.tenant, setup.initial - 1);
    assert.ok(add!.atMs < drop!.atMs, 'added before the drop: both while the writers run');
    for (const f of faults) if (f.kind === 'database-cut') assert.ok(f.outbox >= 1 && f.outbox < setup.initial - 1, `cut of tenant ${f.outbox}`);
    const plans = planTenants(p, faults, 'x');
    assert.equal(plans.length, setup.initial + 1);
    assert.ok(plans.some((t) => t.trigger) && plans.some((t) => !t.trigger), 'tenants with and without the insert trigger');
    assert.ok(Math.abs(plans.reduce((n, t) => n + t.rows, 0) - p.rows) <= plans.length, 'the rows shared out by the time each tenant writes');
    assert.equal(plans[setup.initial - 1]!.toMs, drop!.atMs);
    assert.equal(plans[setup.initial]!.fromMs, add!.atMs);
  }
});
