import { test } from 'node:test';
import assert from 'node:assert/strict';
import { heldHorizon } from '../bench/sections/heldHorizon.js';
import { HOLD_KINDS } from '../bench/horizonHolds.js';
import type { HeldArmResult, Phase } from '../bench/heldHorizonArm.js';

const phase = (arm: HeldArmResult, name: string): Phase => arm.phases.find((p) => p.name === name)!;

// The short version of `npm run bench -- --only heldhorizon` (issue 36): the same section,
// on its own cluster with PgQue's autovacuum settings, every system under every hold, at a
// low rate for a few seconds each. The section checks itself (systems, phases, each hold
// still in force at its end, every row through) and throws otherwise. What is asserted
// here is behaviour, not speed: no hold stops the relay. Before the horizon's writer rule,
// a transaction holding an id elsewhere stopped publishing for --horizon-max-wait-ms (60 s).
test('integration: a long transaction elsewhere (a reader of another table, a reader of the outbox, a transaction holding an id) stops no relay mode, beside a plain SKIP LOCKED queue', async () => {
  const result = await heldHorizon(undefined, {
    rate: 200,
    cleanSeconds: 4,
    holdSeconds: 6,
    afterSeconds: 5,
    partitionSizeIds: 1_000,
    partitionMaintenanceIntervalMs: 1_000,
    partitionRetention: '2s',
  });
  const arms = result.data.arms;
  assert.deepEqual(
    arms.map((a) => a.key),
    ['mark', 'delete', 'partition', 'queue'],
  );
  assert.equal(result.data.settings.autovacuum_vacuum_scale_factor, '0.005');
  for (const arm of arms.filter((a) => a.key !== 'queue')) {
    for (const kind of HOLD_KINDS) {
      const held = phase(arm, kind);
      // Published while held: most of what was written in the phase (the rest within a poll of its end).
      assert.ok(held.acked >= 0.8 * held.inserted, `${arm.key} under ${kind}: ${held.acked} of ${held.inserted} rows acknowledged while held`);
      const after = phase(arm, `after ${kind}`);
      assert.ok(Number.isFinite(after.recoverySeconds), `${arm.key} after ${kind}: the hold's rows not all acknowledged within ${after.seconds} s of the release`);
    }
    // Nothing to warn about: no outbox writer was held open.
    assert.deepEqual(
      phase(arm, 'xid').warnings.map((w) => w.message),
      [],
      `${arm.key}: warnings under a transaction that never wrote the outbox`,
    );
  }
  // The partitioned outbox's maintenance ran: partitions were created ahead while the load went on.
  const partition = arms.find((a) => a.key === 'partition')!;
  assert.ok(phase(partition, 'clean').headroomMin! > 0, 'the partitioned outbox ran out of headroom in its clean phase');
  // The rows carry the client each arm ran on.
  assert.ok(result.rows.every((r) => (r.ran ?? []).length > 0));
});
