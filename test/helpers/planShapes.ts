import assert from 'node:assert/strict';
import type pg from 'pg';
import { BATCH_SETTINGS_SQL, CLAIM_STATEMENT, bindLiterals, claimLiterals, claimSql, executeClaimSql, prepareClaimSql } from '../../src/relay/sql/claim.js';
import { MARK_STATEMENT, executeMarkSql, markSentSql, prepareMarkSql } from '../../src/relay/sql/markSent.js';
import { intArrayLiteral, textLiteral } from '../../src/relay/sql/literals.js';
import { deadLetterSql } from '../../src/relay/sql/deadLetter.js';
import { shardsOf } from '../../src/relay/shards.js';
import type { TestSchema } from './db.js';

// The relay's statements as EXPLAIN shows them, for the plan shapes tests
// (test/planShapes*.integration.test.ts): in a transaction with the relay's batch
// settings (BATCH_SETTINGS_SQL), the plan the relay runs (the generic plan of its
// prepared claim and mark, and of the dead-letter move, which plan_cache_mode makes
// generic too), the plan for the values at hand, and the statements with their values
// written in (what the relay runs behind a transaction pooler: pooler 'transaction',
// beginClaimInlineSql).

export const RELAY = 'plan-relay';

export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Operation?: string;
  Plans?: PlanNode[];
}

/** The plan as a tree of node types, with the relation and index each scan uses. */
export function shape(node: PlanNode): string {
  const label = [node['Node Type'], node.Operation, node['Relation Name'], node['Index Name']].filter(Boolean).join(' ');
  const children = (node.Plans ?? []).map(shape);
  return children.length === 0 ? label : `${label} (${children.join(', ')})`;
}

export function nodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodes)];
}

export async function explain(client: pg.ClientBase, sql: string, params: unknown[]): Promise<PlanNode> {
  const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
  return rows[0]!['QUERY PLAN'][0]!.Plan;
}

export interface Shapes {
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
export async function explainPrepared(client: pg.ClientBase, prepare: string, name: string, args: string): Promise<PlanNode> {
  await client.query(prepare);
  try {
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) EXECUTE ${name}(${args})`);
    return rows[0]!['QUERY PLAN'][0]!.Plan;
  } finally {
    await client.query(`DEALLOCATE ${name}`);
  }
}

export async function shapesOf(db: TestSchema, mode: 'generic' | 'values' | 'inline'): Promise<Shapes> {
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

export const onOutbox = (n: PlanNode): boolean => n['Relation Name'] === 'outbox';

/**
 * Every read of the outbox in `list` is an index scan through `index`. For a partitioned
 * outbox, `isOutbox` picks its partitions and `index` is a function naming each one's
 * partition of the index.
 */
export function assertIndexOnly(what: string, list: PlanNode[], index: string | ((n: PlanNode) => boolean), isOutbox = onOutbox): void {
  const scans = list.filter(isOutbox).filter((n) => n['Node Type'] !== 'ModifyTable');
  assert.ok(scans.length > 0, `${what}: reads the outbox`);
  for (const n of scans) {
    assert.equal(n['Node Type'], 'Index Scan', `${what}: the outbox is read by an index scan, not ${n['Node Type']}`);
    if (typeof index === 'string') assert.equal(n['Index Name'], index, `${what}: through ${index}`);
    else assert.ok(index(n), `${what}: ${n['Relation Name']} through ${n['Index Name']}`);
  }
  assert.ok(!list.some((n) => n['Node Type'] === 'Sort' && (n.Plans ?? []).some((c) => nodes(c).some(isOutbox))), `${what}: no sort of outbox rows`);
  assert.ok(!list.some((n) => /Join/.test(n['Node Type']) && nodes(n).some(isOutbox) && !/Anti/.test(JSON.stringify(n['Node Type']))), `${what}: the outbox is not joined`);
}

