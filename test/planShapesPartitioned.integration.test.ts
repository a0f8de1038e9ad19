import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { RELAY, assertIndexOnly, nodes, shapesOf, type PlanNode, type Shapes } from './helpers/planShapes.js';
import { maintainPartitions, partitionOutbox } from '../src/commands/partitions.js';
import { leaseShards } from './helpers/leases.js';

// The relay's statements on a partitioned outbox (docs/partitioning.md) take the plans
// they take on a plain one, partition by partition: the claim walks each partition's
// unsent-row index in id order, the partitions in order (an ordered Append: no sort, no
// Merge Append of unordered inputs), partitions above the horizon pruned; mark, delete
// and dead-letter move are primary-key lookups. Same plan whether analyzed or not, for the
// relay's generic plans, for the values, and with the values written in (pooled mode).

const schemas: TestSchema[] = [];
after(async () => {
  for (const s of schemas) await s.drop();
});

const SIZE = 50_000;

/** A partitioned outbox with `rows` rows over several partitions, `sent` of the first ones sent, analyzed or never. */
async function partitionedOf(rows: number, options: { sent?: number; analyze: boolean }): Promise<TestSchema> {
  const db = await createTestSchema('pplans');
  schemas.push(db);
  await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: SIZE });
  // Partitions for every row, and some beyond.
  await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: Math.ceil(rows / SIZE) + 2, retention: '0s' });
  const T = `"${db.schema}".outbox`;
  const { rows: parts } = await db.pool.query<{ name: string }>(`SELECT inhrelid::regclass::text AS name FROM pg_inherits WHERE inhparent = $1::regclass`, [T]);
  // No autovacuum: "never analyzed" must stay so for the length of the test.
  for (const p of parts) await db.pool.query(`ALTER TABLE ${p.name} SET (autovacuum_enabled = false)`);
  await db.pool.query(`INSERT INTO ${T} (topic, key, payload) SELECT 'plans', 'k' || (g % 10000), '{"n":1}' FROM generate_series(1, $1::int) AS g`, [rows]);
  if (options.sent) await db.pool.query(`UPDATE ${T} SET sent_at = now() WHERE id <= $1`, [options.sent]);
  await leaseShards(db.pool, db.schema, RELAY);
  if (options.analyze) await db.pool.query(`ANALYZE ${T}`);
  return db;
}

/** The partitions of the outbox's index `index` (each partition's own index). */
async function indexPartitions(db: TestSchema, index: string): Promise<Set<string>> {
  const { rows } = await db.pool.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`,
    [`"${db.schema}".${index}`],
  );
  return new Set(rows.map((r) => r.name));
}

/** A plan shape with each partition's name and index names made alike. */
const normalized = (shape: string): string =>
  shape.replace(/outbox_p\d+_(unsent_idx|id_idx)/g, 'outbox_pN_unsent').replace(/outbox_p\d+_pkey/g, 'outbox_pN_pkey').replace(/outbox_p\d+/g, 'outbox_pN');

const partitionScan = (n: PlanNode): boolean => /^outbox_p\d+$/.test(n['Relation Name'] ?? '');

test('integration: plan shapes on a partitioned outbox: the claim walks the partitions in id order through their unsent-row indexes (no sort), pruned above the horizon; mark, delete and dead letter by primary key; the same on a never-analyzed and an analyzed outbox', async (t) => {
  const cases = {
    'never analyzed, 180,000 rows over 4 partitions': await partitionedOf(180_000, { analyze: false }),
    'analyzed, 180,000 rows, 120,000 of them sent': await partitionedOf(180_000, { sent: 120_000, analyze: true }),
  };
  const shapes: Record<string, Shapes> = {};
  for (const [name, db] of Object.entries(cases)) {
    const unsentIdx = await indexPartitions(db, 'outbox_unsent_idx');
    const pkey = await indexPartitions(db, 'outbox_pkey');
    for (const mode of ['generic', 'values', 'inline'] as const) {
      const generic = mode === 'generic';
      const label = `${name}, ${{ generic: 'generic', values: 'for the values', inline: 'values written in' }[mode]}`;
      const s = (shapes[label] = await shapesOf(db, mode));
      t.diagnostic(`${label}: claim ${s.claim}`);
      assertIndexOnly(`claim (${label})`, s.claimNodes, (n) => unsentIdx.has(n['Index Name'] ?? ''), partitionScan);
      assert.ok(!s.claimNodes.some((n) => n['Node Type'] === 'Sort' || n['Node Type'].startsWith('Bitmap')), `claim (${label}): no sort or bitmap scan: ${s.claim}`);
      assert.ok(s.claimNodes.some((n) => n['Node Type'] === 'Limit'), `claim (${label}): limited`);
      const append = s.claimNodes.find((n) => n['Node Type'] === 'Append' || n['Node Type'] === 'Merge Append');
      assert.ok(append, `claim (${label}): the partitions under one (Merge) Append`);
      // The horizon is the highest id: the partitions above it are pruned, at planning for
      // the values, at executor start-up for the generic plan.
      const scanned = nodes(append).filter(partitionScan).map((n) => n['Relation Name']);
      if (!generic) assert.deepEqual(scanned, ['outbox_p0', 'outbox_p50000', 'outbox_p100000', 'outbox_p150000'], `claim (${label}): in id order, none above the horizon`);
      else assert.ok((append as PlanNode & { 'Subplans Removed'?: number })['Subplans Removed']! > 0, `claim (${label}): partitions above the horizon pruned: ${JSON.stringify(scanned)}`);
      for (const [statement, list] of [['mark', s.markNodes], ['delete', s.deleteNodes], ['dead letter', s.deadLetterNodes]] as const) {
        assertIndexOnly(`${statement} (${label})`, list, (n) => pkey.has(n['Index Name'] ?? ''), partitionScan);
      }
    }
  }
  for (const kind of ['generic', 'for the values', 'values written in']) {
    const [first, ...rest] = Object.entries(shapes).filter(([name]) => name.endsWith(kind));
    for (const [name, s] of rest) {
      for (const statement of ['claim', 'mark', 'delete', 'deadLetter'] as const) {
        // Which partitions a statement reads depends on where its ids are (the mark and
        // the delete are pruned to the partitions of the claimed ids): compare the shapes.
        assert.equal(normalized(s[statement]), normalized(first![1][statement]), `${statement}: same plan on "${name}" as on "${first![0]}"`);
      }
    }
  }
});
