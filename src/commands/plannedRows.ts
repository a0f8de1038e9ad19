import type pg from 'pg';

// The row count the planner expects of a statement, from its EXPLAIN (FORMAT JSON): a
// total for a progress report that costs no scan. Only a guide: stale statistics make it
// wrong, and a plan never says fewer than one row.

/** `Plan Rows` of the top node of an `EXPLAIN (FORMAT JSON)` statement; null when the plan has none. */
export async function plannedRows(db: pg.ClientBase | pg.Pool, explainSql: string, params: unknown[]): Promise<number | null> {
  const { rows } = await db.query<{ 'QUERY PLAN': Array<{ Plan?: { 'Plan Rows'?: unknown } }> }>(explainSql, params);
  const planned = rows[0]?.['QUERY PLAN']?.[0]?.Plan?.['Plan Rows'];
  return typeof planned === 'number' && Number.isFinite(planned) ? Math.round(planned) : null;
}
