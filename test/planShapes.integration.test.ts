import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { BATCH_SETTINGS_SQL, CLAIM_STATEMENT, bindLiterals, claimLiterals, claimSql, executeClaimSql, prepareClaimSql } from '../src/relay/sql/claim.js';
import { MARK_STATEMENT, executeMarkSql, markSentSql, prepareMarkSql } from '../src/relay/sql/markSent.js';
import { intArrayLiteral, textLiteral } from '../src/relay/sql/literals.js';
import { deadLetterSql } from '../src/relay/sql/deadLetter.js';
import { shardsOf } from '../src/relay/shards.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';

// The relay's statements must take the same plan, whatever the outbox looks like to the
// planner: never analyzed, small and analyzed, large and analyzed. EXPLAIN (FORMAT JSON)
// in a transaction with the relay's batch settings (BATCH_SETTINGS_SQL), of the plan
// the relay runs (the generic plan of its prepared claim and mark, and of the dead-letter
// move, which plan_cache_mode makes generic too), of the plan for the values at hand, and
// of the statements with their values written in (what the relay runs behind a
// transaction pooler: pooler 'transaction', beginClaimInlineSql).

const RELAY = 'plan-relay';
const schemas: TestSchema[] = [];
after(async () => {
  for (const s of schemas) await s.drop();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Operation?: string;
  Plans?: PlanNode[];
}

/** The plan as a tree of node types, with the relation and index each scan uses. */
function shape(node: PlanNode): string {
  const label = [node['Node Type'], node.Operation, node['Relation Name'], node['Index Name']].filter(Boolean).join(' ');
  const children = (node.Plans ?? []).map(shape);
  return children.length === 0 ? label : `${label} (${children.join(', ')})`;
}

function nodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodes)];
}

async function explain(client: pg.ClientBase, sql: string, params: unknown[]): Promise<PlanNode> {
  const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
  return rows[0]!['QUERY PLAN'][0]!.Plan;
}

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
  await db.pool.query(`UPDATE "${db.schema}".outbox_shard_leases SET owner = $1, expires_at = now() + interval '1 hour'`, [RELAY]);
  if (options.analyze) await db.pool.query(`ANALYZE ${T}`);
  const { rows: stats } = await db.pool.query<{ reltuples: number }>(`SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, [T]);
  if (!options.analyze) assert.equal(Number(stats[0]!.reltuples), -1, 'the outbox was never analyzed');
  return db;
}

interface Shapes {
  claim: string;
  claimNodes: PlanNode[];
  mark: string;
  markNodes: PlanNode[];
  delete: string;
  deleteNodes: PlanNode[];
  deadLetter: string;
  deadLetterNodes: PlanNode[];
}

/** The generic plan of `sql` prepared as `name` and executed with `args` (SQL text), as the relay runs it. */
async function explainPrepared(client: pg.ClientBase, prepare: string, name: string, args: string): Promise<PlanNode> {
  await client.query(prepare);
  try {
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) EXECUTE ${name}(${args})`);
    return rows[0]!['QUERY PLAN'][0]!.Plan;
  } finally {
    await client.query(`DEALLOCATE ${name}`);
  }
}

async function shapesOf(db: TestSchema, mode: 'generic' | 'values' | 'inline'): Promise<Shapes> {
  const generic = mode === 'generic';
  const s = `"${db.schema}"`;
  const client = await db.pool.connect();
  try {
    await client.query(`BEGIN; ${BATCH_SETTINGS_SQL}`);
    const { rows: started } = await client.query<{ started: string }>('SELECT pg_postmaster_start_time()::text AS started');
    const { rows: gen } = await client.query<{ generation: string }>(`SELECT generation::text AS generation FROM ${s}.outbox_claim_floors`);
    const { rows: maxId } = await client.query<{ max: string }>(`SELECT max(id)::text AS max FROM ${s}.outbox`);
    const claimArgs = { watermark: Number(maxId[0]!.max), shards: shardsOf(0, 2), batchSize: 500, relayId: RELAY, incarnation: started[0]!.started, floor: 0, generation: gen[0]!.generation };
    const claimParams = Object.values(claimArgs);
    const claim = generic
      ? await explainPrepared(client, prepareClaimSql(s), CLAIM_STATEMENT, executeClaimSql(claimArgs).replace(/^EXECUTE \w+\((.*)\)$/s, '$1'))
      : mode === 'inline'
        ? await explain(client, bindLiterals(claimSql(s), claimLiterals(claimArgs)), [])
        : await explain(client, claimSql(s), claimParams);
    // The rows a claim would return, for the statements that follow it.
    const { rows: claimed } = await client.query<{ id: string }>(claimSql(s), claimParams);
    assert.equal(claimed.length, 500);
    const ids = claimed.map((r) => Number(r.id));
    const markArgs = executeMarkSql(ids, RELAY).replace(/^EXECUTE \w+\((.*)\)$/s, '$1');
    const inlineMark = [intArrayLiteral(ids, 'bigint'), textLiteral(RELAY)];
    const mark = generic
      ? await explainPrepared(client, prepareMarkSql(s, 'mark'), MARK_STATEMENT, markArgs)
      : mode === 'inline'
        ? await explain(client, bindLiterals(markSentSql(s, 'mark'), inlineMark), [])
        : await explain(client, markSentSql(s, 'mark'), [ids, RELAY]);
    const del = generic
      ? await explainPrepared(client, prepareMarkSql(s, 'delete'), MARK_STATEMENT, markArgs)
      : mode === 'inline'
        ? await explain(client, bindLiterals(markSentSql(s, 'delete'), inlineMark), [])
        : await explain(client, markSentSql(s, 'delete'), [ids, RELAY]);
    const few = ids.slice(0, 3);
    const texts = (xs: string[]): string => `ARRAY[${xs.map(textLiteral).join(', ')}]::text[]`;
    const deadLetter = generic
      ? await explainPrepared(
          client,
          `PREPARE plan_dead_letter (bigint[], text[], text[], text[], text) AS ${deadLetterSql(s)}`,
          'plan_dead_letter',
          [intArrayLiteral(few, 'bigint'), texts(few.map(() => 'reason')), texts(few.map(() => 'E')), texts(few.map(() => 'park')), textLiteral(RELAY)].join(', '),
        )
      : await explain(client, deadLetterSql(s), [few, few.map(() => 'reason'), few.map(() => 'E'), few.map(() => 'park'), RELAY]);
    return {
      claim: shape(claim),
      claimNodes: nodes(claim),
      mark: shape(mark),
      markNodes: nodes(mark),
      delete: shape(del),
      deleteNodes: nodes(del),
      deadLetter: shape(deadLetter),
      deadLetterNodes: nodes(deadLetter),
    };
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }
}

const onOutbox = (n: PlanNode): boolean => n['Relation Name'] === 'outbox';

function assertIndexOnly(what: string, list: PlanNode[], index: string): void {
  const scans = list.filter(onOutbox).filter((n) => n['Node Type'] !== 'ModifyTable');
  assert.ok(scans.length > 0, `${what}: reads the outbox`);
  for (const n of scans) {
    assert.equal(n['Node Type'], 'Index Scan', `${what}: the outbox is read by an index scan, not ${n['Node Type']}`);
    assert.equal(n['Index Name'], index, `${what}: through ${index}`);
  }
  assert.ok(!list.some((n) => n['Node Type'] === 'Sort' && (n.Plans ?? []).some((c) => nodes(c).some(onOutbox))), `${what}: no sort of outbox rows`);
  assert.ok(!list.some((n) => /Join/.test(n['Node Type']) && nodes(n).some(onOutbox) && !/Anti/.test(JSON.stringify(n['Node Type']))), `${what}: the outbox is not joined`);
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
