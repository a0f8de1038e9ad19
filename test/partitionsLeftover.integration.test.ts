import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { listPartitions, maintain } from '../src/relay/partitions.js';
import { BATCH_SETTINGS_SQL, executeClaimSql, prepareClaimSql } from '../src/relay/sql/claim.js';
import { maintainPartitions, partitionOutbox } from '../src/commands/partitions.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { waitFor } from './helpers/wait.js';

// A crash between a finished detach and its drop leaves a table that is no partition any
// more. The next pass drops it when all of its rows are sent, and attaches it again when a
// row committed late sits in it unsent (else that row would be lost), bumping the claim
// floors' generation so that relays scan it again.

let db: TestSchema;
const schemas: TestSchema[] = [];
after(async () => {
  await db?.drop();
  for (const s of schemas) await s.drop();
});

/** A partitioned outbox with ids 1-1,500 sent, outbox_p1000 left detached by a crashed pass holding one late unsent row (its id returned). */
async function leftoverWithLateRow(prefix: string): Promise<{ s: TestSchema; q: string; lateId: number; generation: () => Promise<bigint> }> {
  const s = await createTestSchema(prefix);
  schemas.push(s);
  const q = `"${s.schema}"`;
  await partitionOutbox({ pool: s.pool, schema: s.schema, partitionSizeIds: 1_000 });
  await maintainPartitions({ pool: s.pool, schema: s.schema, partitionsAhead: 3, retention: '0s' });
  await s.pool.query(`INSERT INTO ${q}.outbox (topic, key, payload, sent_at) SELECT 't', 'k' || (g % 10), '{}', now() FROM generate_series(1, 1500) g`);
  await s.pool.query(`ALTER TABLE ${q}.outbox DETACH PARTITION ${q}.outbox_p1000 CONCURRENTLY`);
  const lateId = 1_007;
  await s.pool.query(`UPDATE ${q}.outbox_p1000 SET sent_at = NULL WHERE id = $1`, [lateId]);
  const generation = async (): Promise<bigint> =>
    BigInt((await s.pool.query<{ g: string }>(`SELECT generation::text AS g FROM ${q}.outbox_claim_floors`)).rows[0]!.g);
  return { s, q, lateId, generation };
}

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
  assert.equal(BigInt(afterGen[0]!.g), BigInt(before[0]!.g) + 2n, 'claim floors generation bumped, once with the ATTACH and once after the transactions that held the outbox through it');
  // The next pass drops the re-attached partition once its row is sent.
  await db.pool.query(`UPDATE ${q}.outbox SET sent_at = now() WHERE sent_at IS NULL`);
  const next = await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: 3, retention: '0s' });
  assert.ok(next.dropped.includes(lateCommit.name), JSON.stringify(next));
});

test('integration: a partition attached again for a late row: a transaction that held the outbox through the ATTACH (its claim runs a plan without the partition) is waited for, then the generation is bumped past the one it read', async () => {
  const { s, q, lateId, generation } = await leftoverWithLateRow('partstale');
  // An exactly-once relay's transaction: one prepared claim, executed again and again
  // inside one transaction, on shards it holds.
  const relayId = 'stalerelay';
  await s.pool.query(`INSERT INTO ${q}.outbox_relays (relay_id, application_name, lease_ttl_ms) VALUES ($1, 't', 600000)`, [relayId]);
  await s.pool.query(`UPDATE ${q}.outbox_shard_leases SET owner = $1, expires_at = now() + interval '1 hour'`, [relayId]);
  const incarnation = (await s.pool.query<{ t: string }>('SELECT pg_postmaster_start_time()::text AS t')).rows[0]!.t;
  const shards = Array.from({ length: 256 }, (_, i) => i);
  const relay = await s.pool.connect();
  const claim = async (generation: string, floor: number): Promise<number[]> =>
    (await relay.query<{ id: string }>(executeClaimSql({ watermark: 1_500, shards, batchSize: 10, relayId, incarnation, floor, generation }))).rows.map((r) => Number(r.id));
  try {
    await relay.query(prepareClaimSql(q));
    await relay.query(`BEGIN; ${BATCH_SETTINGS_SQL}`);
    const before = await generation();
    assert.deepEqual(await claim(String(before), 0), [], 'the late row is in no partition yet');

    const pass = maintain(s.pool, s.schema, { partitionsAhead: 3, retentionMs: 0, detachMaxWaitMs: 60_000 });
    let passEnded = false;
    void pass.finally(() => (passEnded = true)).catch(() => undefined);
    await waitFor('the ATTACH and its first bump committed', async () => (await generation()) > before);
    // The transaction's claim keeps the plan it made before the ATTACH: under the new
    // generation it scans from 0 and still misses the late row. A floor it produced would
    // hold under this generation (what a CI run hit, through the low-water walk).
    assert.deepEqual(await claim(String(before), 1_500), [], 'Postgres reuses the plan without the partition');
    const seen = (await relay.query<{ g: string }>(`SELECT generation::text AS g FROM ${q}.outbox_claim_floors`)).rows[0]!.g;
    assert.equal(BigInt(seen), before + 1n);
    assert.equal(passEnded, false, 'the pass waits for the transaction that held the outbox');
    await relay.query('COMMIT');

    const result = await pass;
    assert.deepEqual(result.kept.filter((k) => k.partition === 'outbox_p1000').map((k) => k.reason), ['late commit']);
    assert.equal(await generation(), BigInt(seen) + 1n, 'bumped again after the transaction ended');
    // So a floor found under the generation the stale claim read scans from 0 again, and
    // the claim, planned anew, has the row.
    await relay.query(`BEGIN; ${BATCH_SETTINGS_SQL}`);
    assert.deepEqual(await claim(seen, 1_500), [lateId]);
  } finally {
    await relay.query('ROLLBACK').catch(() => undefined);
    relay.release();
  }
});

test('integration: the wait for the transactions that held the outbox through a re-ATTACH is bounded: a report open for longer does not hold the pass, which bumps the generation twice', async () => {
  const { s, q, generation } = await leftoverWithLateRow('partwait');
  const report = await s.pool.connect();
  try {
    await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await report.query(`SELECT count(*) FROM ${q}.outbox`);
    const before = await generation();
    const result = await maintain(s.pool, s.schema, { partitionsAhead: 3, retentionMs: 0, detachMaxWaitMs: 300 });
    assert.ok(result.kept.some((k) => k.partition === 'outbox_p1000' && k.reason === 'late commit'), JSON.stringify(result));
    assert.equal(await generation(), before + 2n);
    const open = await s.pool.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'`, [(report as unknown as { processID: number }).processID]);
    assert.equal(open.rowCount, 1, 'the report is still open');
  } finally {
    await report.query('ROLLBACK').catch(() => undefined);
    report.release();
  }
});
