import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { RELAY, assertIndexOnly, shapesOf, type Shapes } from './helpers/planShapes.js';
import { leaseShards } from './helpers/leases.js';
import { Membership } from '../src/relay/membership.js';
import { BATCH_SETTINGS_SQL } from '../src/relay/sql/claim.js';
import { liveLeasesSql } from '../src/relay/sql/leases.js';
import { silentLogger } from '../src/shared/logger.js';

// The relay's statements must take the same plan, whatever the outbox looks like to the
// planner: never analyzed, small and analyzed, large and analyzed (how the plans are
// read: test/helpers/planShapes.ts; the partitioned outbox's: planShapesPartitioned).

const schemas: TestSchema[] = [];
after(async () => {
  for (const s of schemas) await s.drop();
});

/** A schema whose outbox holds `rows` unsent rows (and `sent` sent ones before them), analyzed or never. */
async function outboxOf(rows: number, options: { sent?: number; analyze: boolean }): Promise<TestSchema> {
  const db = await createTestSchema('plans');
  schemas.push(db);
  const T = `"${db.schema}".outbox`;
  // No autovacuum: "never analyzed" must stay so for the length of the test.
  await db.pool.query(`ALTER TABLE ${T} SET (autovacuum_enabled = false)`);
  const total = rows + (options.sent ?? 0);
  await db.pool.query(
    `INSERT INTO ${T} (topic, key, payload) SELECT 'plans', 'k' || (g % 10000), '{"n":1}' FROM generate_series(1, $1::int) AS g`,
    [total],
  );
  if (options.sent) await db.pool.query(`UPDATE ${T} SET sent_at = now() WHERE id <= (SELECT min(id) FROM ${T}) + $1 - 1`, [options.sent]);
  await leaseShards(db.pool, db.schema, RELAY);
  if (options.analyze) await db.pool.query(`ANALYZE ${T}`);
  const { rows: stats } = await db.pool.query<{ reltuples: number }>(`SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, [T]);
  if (!options.analyze) assert.equal(Number(stats[0]!.reltuples), -1, 'the outbox was never analyzed');
  return db;
}

test('integration: plan shapes: the claim, mark, delete and dead-letter statements take the same index plans on a never-analyzed, a small and a large outbox (generic plans as the relay runs them, plans for the values, and the statements with their values written in, as it runs them behind a transaction pooler)', async () => {
  const cases = {
    'never analyzed, 200,000 rows': await outboxOf(200_000, { analyze: false }),
    'analyzed, 10,000 rows': await outboxOf(10_000, { analyze: true }),
    'analyzed, 600,000 rows, 400,000 of them sent': await outboxOf(200_000, { sent: 400_000, analyze: true }),
  };
  const shapes: Record<string, Shapes> = {};
  for (const [name, db] of Object.entries(cases)) {
    shapes[`${name}, generic`] = await shapesOf(db, 'generic');
    shapes[`${name}, for the values`] = await shapesOf(db, 'values');
    shapes[`${name}, values written in`] = await shapesOf(db, 'inline');
  }

  for (const [name, s] of Object.entries(shapes)) {
    // Claim: walk the unsent-row index in id order and stop at the batch size; parked
    // keys by their primary key; no sort, no bitmap.
    assertIndexOnly(`claim (${name})`, s.claimNodes, 'outbox_unsent_idx');
    assert.ok(!s.claimNodes.some((n) => n['Node Type'] === 'Sort' || n['Node Type'].startsWith('Bitmap')), `claim (${name}): no sort or bitmap: ${s.claim}`);
    assert.ok(s.claimNodes.some((n) => n['Node Type'] === 'Limit'), `claim (${name}): limited`);
    // Mark, delete, dead-letter move: primary-key lookups under a lease array.
    assertIndexOnly(`mark (${name})`, s.markNodes, 'outbox_pkey');
    assertIndexOnly(`delete (${name})`, s.deleteNodes, 'outbox_pkey');
    assertIndexOnly(`dead letter (${name})`, s.deadLetterNodes, 'outbox_pkey');
  }
  assert.equal(Object.keys(shapes).length, 9, 'three outboxes, three ways each');
  for (const kind of ['generic', 'for the values', 'values written in']) {
    const [first, ...rest] = Object.entries(shapes).filter(([name]) => name.endsWith(kind));
    for (const [name, s] of rest) {
      for (const statement of ['claim', 'mark', 'delete', 'deadLetter'] as const) {
        assert.equal(s[statement], first![1][statement], `${statement}: same plan on "${name}" as on "${first![0]}"`);
      }
    }
  }
});

test("integration: plan shapes: the id audit's count and largest id of unsent rows above the sequence bound their scans of the unsent index by the sequence's last value (read once), not a filter run on every unsent row", async () => {
  const { idsAboveSequenceSql } = await import('../src/relay/idAudit.js');
  const db = await outboxOf(10_000, { analyze: true });
  const { rows } = await db.pool.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${idsAboveSequenceSql(`"${db.schema}"`)}`);
  const nodes: PlanNode[] = [];
  const walk = (n: PlanNode): void => {
    nodes.push(n);
    for (const c of n.Plans ?? []) walk(c);
  };
  walk(rows[0]!['QUERY PLAN'][0]!.Plan);
  const scans = nodes.filter((n) => n['Index Name'] === 'outbox_unsent_idx');
  const shown = JSON.stringify(nodes.map((n) => [n['Node Type'], n['Index Name'], n['Index Cond'], n.Filter]));
  // Both the count and the largest id: neither walks the index from an end it does not bound.
  assert.equal(scans.length, 2, `two scans of the unsent index: ${shown}`);
  assert.ok(scans.every((n) => /\bid > /.test(n['Index Cond'] ?? '')), `every scan of the unsent index bounded by id: ${shown}`);
  assert.ok(!nodes.some((n) => /pg_sequence_last_value/.test(n.Filter ?? '')), 'no per-row filter on the sequence');
});

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Filter?: string;
  Plans?: PlanNode[];
}

test("integration: lease rounds under a held horizon: a relay's membership rounds write no lease row (only its heartbeat), so the claim's lease check reads as few buffers after 200 rounds as after one", async () => {
  const db = await createTestSchema('leaserounds');
  schemas.push(db);
  const s = `"${db.schema}"`;
  const membership = new Membership(s, 'rounds-relay', 'outbox-relay:rounds', 10_000, silentLogger());
  const round = async (): Promise<void> => {
    const c = await db.pool.connect();
    try {
      await membership.tick(c);
    } finally {
      c.release();
    }
  };
  /** Buffers the claim's lease check reads, under the batch settings the claim runs with. */
  const leaseCheckHits = async (): Promise<number> => {
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query(BATCH_SETTINGS_SQL);
      const plan = (await c.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT ARRAY(${liveLeasesSql(s, '$1')})`, ['rounds-relay'])).rows[0]['QUERY PLAN'][0];
      await c.query('COMMIT');
      return plan.Plan['Shared Hit Blocks'] as number;
    } finally {
      c.release();
    }
  };
  const versions = async (): Promise<string> => (await db.pool.query(`SELECT string_agg(ctid::text, ',' ORDER BY shard) AS v FROM ${s}.outbox_shard_leases`)).rows[0].v;

  await round();
  assert.equal(membership.owned.size, 256, 'the relay holds every shard');
  // A snapshot held open elsewhere (a report): no row version written from now on can be removed.
  const holder = await db.pool.connect();
  try {
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
    const before = { hits: await leaseCheckHits(), versions: await versions() };
    for (let i = 0; i < 200; i++) await round();
    assert.equal(membership.owned.size, 256);
    const afterRounds = { hits: await leaseCheckHits(), versions: await versions() };
    assert.equal(afterRounds.versions, before.versions, 'no lease row was rewritten by the rounds');
    // Renewing the 256 lease rows every round took this check from 4 to 329 buffers over 200
    // rounds (bench/committed/held-horizon-leases-2026-12-05); the heartbeat row's own
    // versions cost a few pages.
    assert.ok(afterRounds.hits <= before.hits + 12, `lease check: ${before.hits} buffers after one round, ${afterRounds.hits} after 200`);
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
  }
});
