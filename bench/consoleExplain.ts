/**
 * What the console's list pages read over heavy rows, plan by plan (issue 33): the tables of
 * bench/consoleHeavy.ts (200,000 dead letters, 60 of them with a 1 MB payload), and each
 * statement a list page or the overview runs, through EXPLAIN (ANALYZE, BUFFERS) with the
 * parameters the console passes. Timings in a plan depend on the machine's load; the rows
 * and buffers a statement touches do not, and they are what docs/console.md quotes.
 *
 *   npx tsx bench/consoleExplain.ts        # writes bench/committed/<time>-console-explain.txt
 *
 * It checks what it claims: no scan of a page's statements produces more rows than its
 * LIMIT (a time range's, than the range holds), and the overview's groupings return at most
 * 20 groups of each. Last, it records the time range's read on a table whose pages VACUUM
 * could not mark all-visible, the case that read is not fast in.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { deadLetterMatchesSql, deadLetterPageSql, timeRangeIdsSql } from '../src/console/sql/deadLetters.js';
import { deadLetterGroupsSql } from '../src/console/sql/overview.js';
import { benchSchema, DATABASE_URL } from './common.js';
import { seedHeavyDeadLetters } from './consoleHeavy.js';
import { load1 } from './machine.js';
import { currentCommit } from './summary.js';

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows': number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PlanNode[];
}

const N = 200_000;
const pool = new pg.Pool({ connectionString: DATABASE_URL });
const { schema, drop } = await benchSchema(pool, 'bench_console_explain');
const s = `"${schema}"`;
const out: string[] = [];
const problems: string[] = [];
try {
  await seedHeavyDeadLetters(pool, schema, { deadLetters: N, heavyRows: 60 });
  const commit = currentCommit();
  out.push(
    `console list pages, EXPLAIN (ANALYZE, BUFFERS): ${N.toLocaleString('en-US')} dead letters, 60 of 1 MB; ${new Date().toISOString()}`,
    `commit ${commit ? `${commit.hash}${commit.dirty ? ' with uncommitted changes' : ''}` : 'not recorded'}; load1 ${load1()}; each statement run once before the plan shown`,
    '',
  );
  const since = (await pool.query<{ t: Date }>(`SELECT now() - interval '1 day' AS t`)).rows[0]!.t;
  const range = (await pool.query<{ count: number; first_id: string; last_id: string }>(timeRangeIdsSql(s), [since, null, 500_001])).rows[0]!;
  // The filter's $1-$8, then the time range's ids $9-$10.
  const filter = (f: { topic?: string; reason?: string; errorName?: string; since?: Date }, bounds: [string, string] | [null, null] = [null, null]): unknown[] =>
    [null, f.topic ?? null, null, f.reason ?? null, f.since ?? null, null, null, f.errorName ?? null, ...bounds];
  const mid = N / 2;
  const statements: Array<[string, string, unknown[], number]> = [
    ['no filter, first page', deadLetterPageSql(s), [...filter({}), null, 51], 51],
    ['no filter, deep page', deadLetterPageSql(s), [...filter({}), mid, 51], 51],
    ['no filter, count (capped)', deadLetterMatchesSql(s), [...filter({}), 10_001], 10_001],
    ['a topic, first page', deadLetterPageSql(s), [...filter({ topic: 'payments' }), null, 51], 51],
    ['a topic, count (capped)', deadLetterMatchesSql(s), [...filter({ topic: 'payments' }), 10_001], 10_001],
    ['reason "bytes", first page', deadLetterPageSql(s), [...filter({ reason: 'bytes' }), null, 51], 51],
    ['reason "bytes", count (capped)', deadLetterMatchesSql(s), [...filter({ reason: 'bytes' }), 10_001], 10_001],
    ['an error name, deep page', deadLetterPageSql(s), [...filter({ errorName: 'MESSAGE_TOO_LARGE' }), mid, 51], 51],
    ['since 1 day ago, the range\'s ids', timeRangeIdsSql(s), [since, null, 500_001], 500_001],
    ['since 1 day ago, first page', deadLetterPageSql(s), [...filter({ since }, [range.first_id, range.last_id]), null, 51], 51],
    ['since 1 day ago, count (capped)', deadLetterMatchesSql(s), [...filter({ since }, [range.first_id, range.last_id]), 10_001], 10_001],
    ['overview, groups by reason and topic', deadLetterGroupsSql(s), [5_000, 20], 5_000],
  ];
  const explain = async (what: string, sql: string, params: unknown[], most: number): Promise<void> => {
    await pool.query(sql, params);
    const json = (await pool.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, params)).rows[0]!['QUERY PLAN'][0]!.Plan;
    const text = (await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, params)).rows.map((r) => r['QUERY PLAN']);
    // Rows each scan of the dead letters produced: what the statement read from the table
    // or one of its indexes. (The parked keys, probed per row or hashed when few, are
    // checked with many below.)
    const scans: PlanNode[] = [];
    const walk = (n: PlanNode): void => {
      if (n['Relation Name'] === 'outbox_dead_letters') scans.push(n);
      n.Plans?.forEach(walk);
    };
    walk(json);
    const scanned = Math.max(0, ...scans.map((n) => n['Actual Rows']));
    const buffers = json['Shared Hit Blocks'] + json['Shared Read Blocks'];
    out.push(`== ${what}: ${json['Actual Rows']} rows out, at most ${scanned.toLocaleString('en-US')} rows from one scan of the dead letters, ${buffers} buffers`, ...text, '');
    if (scanned > most) problems.push(`${what}: a scan produced ${scanned} rows, more than ${most}`);
    if (what.startsWith('overview') && json['Actual Rows'] > 20 + 20 + 1) problems.push(`${what}: ${json['Actual Rows']} groups left Postgres`);
  };
  for (const [what, sql, params, most] of statements) await explain(what, sql, params, what.includes('range') ? Number(range.count) : most);

  // The "parks its key" probe with many parked keys: still one probe a row, not a pass over them.
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id) SELECT 'elsewhere', 'k-' || g, g FROM generate_series(1, $1::int) AS g`, [N]);
    await client.query(`ANALYZE ${s}.outbox_parked_keys`);
    const text = (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${deadLetterPageSql(s)}`, [...filter({}), mid, 51])).rows.map((r) => r['QUERY PLAN']);
    out.push(`== no filter, deep page, with ${N.toLocaleString('en-US')} more parked keys (rolled back)`, ...text, '');
    if (text.some((l) => /Seq Scan on outbox_parked_keys/.test(l))) problems.push('with many parked keys the page reads every parked key');
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }

  // The time range's read where VACUUM could not mark the pages all-visible: a snapshot
  // older than the rows stayed open while they were vacuumed (a long transaction anywhere
  // in the cluster does that; so does a table's newest part, until autovacuum reaches
  // it). Recorded, not held to a bound: the index-only scan has to visit the heap.
  const vm = await benchSchema(pool, 'bench_console_explain_vm');
  const holder = await pool.connect();
  try {
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1');
    await seedHeavyDeadLetters(pool, vm.schema, { deadLetters: N, heavyRows: 60 });
    const vs = `"${vm.schema}"`;
    const vsince = (await pool.query<{ t: Date }>(`SELECT now() - interval '1 day' AS t`)).rows[0]!.t;
    await explain("since 1 day ago, the range's ids, the same table vacuumed while an older snapshot was open", timeRangeIdsSql(vs), [vsince, null, 500_001], Number.POSITIVE_INFINITY);
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    await vm.drop().catch(() => undefined);
  }
} finally {
  await drop().catch(() => undefined);
  await pool.end();
}
const file = fileURLToPath(new URL(`./committed/${new Date().toISOString().replace(/[:.]/g, '-')}-console-explain.txt`, import.meta.url));
writeFileSync(file, `${out.join('\n')}\n${problems.length ? `PROBLEMS:\n${problems.join('\n')}\n` : 'Every statement stayed within its bound.\n'}`);
process.stdout.write(`${file}\n`);
if (problems.length > 0) {
  process.stderr.write(`console explain: ${problems.join('; ')}\n`);
  process.exitCode = 1;
}
