import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { listPartitions } from '../src/relay/partitions.js';
import { maintainPartitions, partitionOutbox } from '../src/commands/partitions.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';

// A crash between a finished detach and its drop leaves a table that is no partition any
// more. The next pass drops it when all of its rows are sent, and attaches it again when a
// row committed late sits in it unsent (else that row would be lost), bumping the claim
// floors' generation so that relays scan it again.

let db: TestSchema;
after(async () => {
  await db?.drop();
});

test('integration: a partition detached by a pass that crashed before its drop: dropped by the next pass when all sent, attached again (generation bumped) when it holds an unsent row', async () => {
  db = await createTestSchema('partleft');
  const q = `"${db.schema}"`;
  await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
  await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: 3, retention: '0s' });
  // Ids 1-3,500, all sent: outbox_p0, two whole partitions of 1,000, part of a third.
  await db.pool.query(`INSERT INTO ${q}.outbox (topic, key, payload, sent_at) SELECT 't', 'k' || (g % 10), '{}', now() FROM generate_series(1, 3500) g`);
  const parts = await listPartitions(db.pool, db.schema);
  const [sentOnly, lateCommit] = parts.filter((p) => p.lower !== null && p.upper <= 3_500);
  assert.ok(sentOnly && lateCommit, JSON.stringify(parts));
  // Both detached by a pass that then crashed; a late row lands unsent in the second.
  for (const p of [sentOnly, lateCommit]) await db.pool.query(`ALTER TABLE ${q}.outbox DETACH PARTITION ${q}.${p.name} CONCURRENTLY`);
  await db.pool.query(`UPDATE ${q}.${lateCommit.name} SET sent_at = NULL WHERE id = $1`, [lateCommit.lower! + 7]);
  const { rows: before } = await db.pool.query<{ g: string }>(`SELECT generation::text AS g FROM ${q}.outbox_claim_floors`);

  const pass = await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: 3, retention: '0s' });

  assert.ok(pass.dropped.includes(sentOnly.name), JSON.stringify(pass));
  // Attached again, then kept by the same pass's retention for its unsent row.
  assert.deepEqual(pass.kept.filter((k) => k.partition === lateCommit.name).map((k) => k.reason), ['late commit', 'unsent rows']);
  const after = await listPartitions(db.pool, db.schema);
  assert.ok(!after.some((p) => p.name === sentOnly.name));
  assert.ok(after.some((p) => p.name === lateCommit.name && p.lower === lateCommit.lower && p.upper === lateCommit.upper), 'attached again with its bounds');
  const { rows: gone } = await db.pool.query(`SELECT to_regclass($1) AS t`, [`${q}.${sentOnly.name}`]);
  assert.equal(gone[0].t, null, 'the all-sent leftover is dropped');
  const { rows: visible } = await db.pool.query(`SELECT id FROM ${q}.outbox WHERE sent_at IS NULL`);
  assert.deepEqual(visible.map((r) => Number(r.id)), [lateCommit.lower! + 7], 'the late row is in the outbox again');
  const { rows: afterGen } = await db.pool.query<{ g: string }>(`SELECT generation::text AS g FROM ${q}.outbox_claim_floors`);
  assert.equal(BigInt(afterGen[0]!.g), BigInt(before[0]!.g) + 1n, 'claim floors generation bumped');
  // The next pass drops the re-attached partition once its row is sent.
  await db.pool.query(`UPDATE ${q}.outbox SET sent_at = now() WHERE sent_at IS NULL`);
  const next = await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: 3, retention: '0s' });
  assert.ok(next.dropped.includes(lateCommit.name), JSON.stringify(next));
});
