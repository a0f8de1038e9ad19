import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { readSummary, type RunSummary } from '../../bench/summary.js';
import { findBlocks, README_CONTEXT, regenerate, renderBlock, section, SECTION_KINDS, strayFigures, strayMeasurements, TABLE_FILES } from '../../bench/tables.js';
import type { Row } from '../../bench/report.js';

// README and docs/benchmarks.md quote benchmark runs only through tables written by
// `npm run bench:tables` from a committed summary (bench/committed/). These tests hold the
// files to that: a table edited by hand, a table naming a summary that is not there, a
// figure typed beside the tables.

const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (file: string): string => readFileSync(`${root}${file}`, 'utf8');
const load = (from: string): RunSummary => readSummary(`${root}${from}`);

/** The tables each file must have: the harness counts them, so a marker lost in an edit fails too. */
const EXPECTED: Record<(typeof TABLE_FILES)[number], string[]> = { 'README.md': ['readme'], 'docs/benchmarks.md': ['docs', 'drain', 'consumer', 'retention', 'pooler', 'exactlyonce', 'heldhorizon', 'heldhorizon', 'heldhorizon', 'heldhorizon', 'heldhorizon', 'tenants', 'encodings'], 'docs/console.md': ['console', 'consoleheavy'] };

/** The first line where two texts differ, for a failure message a reader can act on. */
function firstDifference(a: string, b: string): string {
  const x = a.split('\n');
  const y = b.split('\n');
  const i = x.findIndex((line, n) => line !== y[n]);
  return `line ${i + 1}:\n  in the file: ${x[i]}\n  generated:   ${y[i]}`;
}

for (const file of TABLE_FILES) {
  test(`${file}: its benchmark tables are the ones bench:tables writes from the committed summaries they name`, () => {
    const text = read(file);
    const blocks = findBlocks(text, file);
    assert.deepEqual(blocks.map((b) => b.kind), EXPECTED[file], `${file} has the expected marked tables`);
    for (const b of blocks) {
      assert.match(b.from, /^bench\/committed\/[^/]+\.json$/, `${file}: the table names a summary in bench/committed/`);
      assert.doesNotThrow(() => load(b.from), `${file}: the table names ${b.from}, which must exist and be a run summary`);
    }
    const generated = regenerate(text, file, load);
    assert.ok(generated === text, `${file} differs from what \`npm run bench:tables\` writes (run it): ${firstDifference(text, generated)}`);
  });
}

test('README: no benchmark figure outside a generated table (performance section: no figure at all; elsewhere: none with a measurement unit)', () => {
  const readme = read('README.md');
  const performance = section(readme, 'Performance');
  assert.ok(performance, 'README has a "## Performance" section');
  assert.ok(findBlocks(performance, 'README.md#performance').length === 1, 'the generated table is inside the performance section');
  assert.deepEqual(strayFigures(performance), [], 'figures in README\'s performance section outside the generated table');
  assert.deepEqual(strayMeasurements(readme), [], 'measurements in README outside the generated table');
});

test('docs/benchmarks.md: measurements outside the generated table only under "History", each part dated and with its commit', () => {
  const docs = read('docs/benchmarks.md');
  const history = docs.indexOf('\n## History');
  assert.ok(history > 0, 'docs/benchmarks.md has a "## History" section');
  assert.deepEqual(strayMeasurements(docs.slice(0, history)), [], 'measurements before the History section outside the generated table');
  const parts = docs.slice(history).split('\n').filter((l) => l.startsWith('### '));
  assert.ok(parts.length > 0, 'the History section has parts');
  for (const heading of parts) assert.match(heading, /\d{4}-\d{2}-\d{2}.*commits? [0-9a-f]{7}/, `history part "${heading}" names its date and commit`);
  assert.equal(docs.slice(history + 1).match(/^## /gm)?.length, 1, 'History is the last "## " section');
});

// The checks above must be able to fail: each one against a file that breaks its rule.

const row = (section: string, what: string, value: string, target?: string, met?: boolean): Row => ({ section, what, value, target, met, load1: 1.5 });

const FULL: RunSummary = {
  format: 1,
  name: 'outbox-relay benchmark, full profile',
  profile: 'full',
  startedAt: '2026-12-01T12:50:05.606Z',
  finishedAt: '2026-12-01T13:07:00.000Z',
  commit: { hash: '2943f08aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', dirty: false },
  sectionsSelected: ['ceilings', 'drain', 'cost', 'multioutbox'],
  sectionsCompleted: ['ceilings', 'drain', 'multioutbox'],
  sectionProblems: { cost: 'failed: pgbench exited 1' },
  machine: { cpus: 2, cpuModel: 'Intel Xeon', memoryGiB: 23, node: 'v20.20.2', postgres: '15.20', kafkaBrokers: ['127.0.0.1:9092'] },
  rows: [
    row('1. ceilings', 'raw kafkajs producer, batch 500, acks=all, 2 in flight (ceiling 1)', '61,004 rows/s'),
    row('1. ceilings', 'raw Postgres claim-and-mark loop, batch 500, 2 loops (ceiling 2)', '92,411 rows/s'),
    row('2. drain', 'relay, 200,000-row backlog, defaults', '29,845 rows/s', '≥ 20,000', true),
    row('2. drain', 'relay / ceiling 1', '0.49', '≥ 0.6', false),
    row('5. scale', 'relay peak RSS, 10,000 / 1,000,000 backlog', '110 / 166 MiB', '≤ 150 MB, flat', false),
    row('11. many outboxes', 'one process / 4 processes: rows/s', '0.97'),
    row('11. many outboxes', 'one process / 4 processes: odd | label', 'a | b'),
  ],
};

test('the rendering: README has every row with a target and the context rows, docs every row; both list every target not met, the run, its load and its commit', () => {
  const readme = renderBlock('readme', FULL, 'bench/committed/x.json');
  const docs = renderBlock('docs', FULL, 'bench/committed/x.json');
  for (const text of [readme, docs]) {
    assert.match(text, /Run of 2026-12-01 12:50 UTC, 17 min, `npm run bench` \(full profile\), on commit 2943f08; sections ceilings, drain, cost, multioutbox\./);
    assert.match(text, /load average 1\.5 while the rows came in\. Result file: `bench\/committed\/x\.json`/);
    assert.match(text, /Sections without a result in this run: cost \(failed: pgbench exited 1\)\./);
    assert.match(text, /Not met in this run:\n\n- 2\. drain, relay \/ ceiling 1: 0\.49 \(target ≥ 0\.6\)\n- 5\. scale, relay peak RSS, 10,000 \/ 1,000,000 backlog: 110 \/ 166 MiB \(target ≤ 150 MB, flat\)$/);
    assert.ok(text.includes('odd \\| label | a \\| b |'), 'a | in a label or value is escaped, not a new cell');
  }
  assert.ok(readme.includes('| 2. drain: relay / ceiling 1 | 0.49 | ≥ 0.6 | **no** |'));
  assert.ok(readme.includes('| 1. ceilings: raw kafkajs producer, batch 500, acks=all, 2 in flight (ceiling 1) | 61,004 rows/s |  |  |'));
  assert.ok(!readme.includes('claim-and-mark'), 'README leaves out rows with neither a target nor a context label');
  assert.equal(docs.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| section')).length, FULL.rows.length, 'docs has every row');
  const quick = renderBlock('readme', { ...FULL, profile: 'quick', commit: { hash: 'abcdef0123', dirty: true }, sectionProblems: {}, rows: FULL.rows.slice(0, 3) }, 'f');
  assert.match(quick, /quick profile: small sizes, on a machine shared with other work, so the figures are noisy/);
  assert.match(quick, /on commit abcdef0 with uncommitted changes/);
  assert.match(quick, /\n\nEvery target in this run was met\.$/);
});

test('the checks fail on a table edited by hand, a summary that does not exist, a figure typed beside the table, a broken marker', () => {
  const from = 'bench/committed/x.json';
  const file = `# x\n\n## Performance\n\nProse.\n\n<!-- bench:table:readme from=${from} -->\n${renderBlock('readme', FULL, from)}\n<!-- /bench:table -->\n\n## Next\n`;
  const loadFull = (): RunSummary => FULL;
  assert.equal(regenerate(file, 'f', loadFull), file, 'an untouched file regenerates to itself');
  assert.notEqual(regenerate(file.replace('29,845 rows/s', '31,000 rows/s'), 'f', loadFull), file.replace('29,845 rows/s', '31,000 rows/s'), 'a figure changed by hand');
  assert.notEqual(regenerate(file.replace(/\n- 5\. scale.*\n/, '\n'), 'f', loadFull), file.replace(/\n- 5\. scale.*\n/, '\n'), 'an unmet target dropped from the list');
  assert.throws(() => readSummary(`${root}bench/committed/no-such-run.json`), /bench\/committed\/no-such-run\.json does not exist/);
  const perf = section(file, 'Performance')!;
  assert.deepEqual(strayFigures(perf), []);
  assert.deepEqual(strayFigures(perf.replace('Prose.', 'Prose: 29,845 rows/s.')), ['Prose: 29,845 rows/s.']);
  assert.deepEqual(strayFigures(perf.replace('Prose.', 'Polls every `10` ms.')), [], 'a setting in inline code is not a figure');
  assert.deepEqual(strayMeasurements('It consumed 64,872 messages/s.\nA 1.4 × TTL.\nWriters at 1,000 rows/s.\nFrom 51k to 17k msg/s.\nAt 1,000 rows/s offered, 980 rows/s.'), [
    'It consumed 64,872 messages/s.',
    'From 51k to 17k msg/s.',
    'At 1,000 rows/s offered, 980 rows/s.',
  ], 'a result is a measurement, an offered load is not');
  assert.throws(() => findBlocks(file.replace('<!-- /bench:table -->', ''), 'f'), /has no <!-- \/bench:table -->/);
  assert.throws(() => findBlocks(file.replace('table:readme', 'table:reedme'), 'f'), /unknown table kind "reedme"/);
  assert.throws(() => findBlocks(file.replace(` from=${from}`, ''), 'f'), /not of the form/);
  assert.match(regenerate(file, 'f', loadFull, 'bench/committed/y.json'), /<!-- bench:table:readme from=bench\/committed\/y\.json -->\nRun of .*\n.*\n.*Result file: `bench\/committed\/y\.json`/);
});

test('every context row README picks is a label a section writes (a renamed label would drop it silently)', () => {
  const sources = readdirSync(`${root}bench/sections`).filter((f) => f.endsWith('.ts')).map((f) => read(`bench/sections/${f}`));
  for (const [name, start] of README_CONTEXT) {
    const source = sources.find((text) => text.includes(`'${name}'`));
    assert.ok(source, `a section writes rows of "${name}"`);
    assert.ok(source.includes(start), `section "${name}" writes a row starting "${start}"`);
  }
});

test("a section's table (retention, pooler) has that section's rows only, its unmet targets only, and says so when the run it names has none", () => {
  const run: RunSummary = {
    ...FULL,
    sectionsSelected: ['retention'],
    sectionsCompleted: ['retention'],
    sectionProblems: {},
    rows: [
      row('12. retention', 'mark + cleanup: table + indexes, MiB', '3.8 / 5.2; 1.05'),
      row('12. retention', "writers' tps, delete mode / no relay", '0.90', '≥ 0.95', false),
      row('2. drain', 'relay / ceiling 1', '0.49', '≥ 0.6', false),
    ],
  };
  const text = renderBlock('retention', run, 'bench/committed/r.json');
  assert.match(text, /^Run of 2026-12-01 12:50 UTC, .*sections retention\./);
  assert.ok(text.includes('| mark + cleanup: table + indexes, MiB | 3.8 / 5.2; 1.05 |  |  | not recorded | 1.5 |'));
  assert.ok(!text.includes('ceiling 1'), 'no row of another section');
  assert.match(text, /Not met in this run:\n\n- 12\. retention, writers' tps, delete mode \/ no relay: 0\.90 \(target ≥ 0\.95\)$/);
  assert.equal(renderBlock('pooler', run, 'bench/committed/r.json'), 'The run in `bench/committed/r.json` has no rows of section "13. pooled mode" (its sections: retention).');
});

test('bench:tables --from F --kinds retention,pooler re-points those tables only; the others keep the summary they name', () => {
  const a = 'bench/committed/a.json';
  const b = 'bench/committed/b.json';
  const runB: RunSummary = { ...FULL, startedAt: '2026-12-02T01:00:00.000Z', rows: [row('12. retention', 'x', '1')] };
  const load = (from: string): RunSummary => (from === b ? runB : FULL);
  const file = `<!-- bench:table:docs from=${a} -->\n<!-- /bench:table -->\n\n<!-- bench:table:retention from=${a} -->\n<!-- /bench:table -->\n`;
  const out = regenerate(file, 'f', load, b, ['retention', 'pooler']);
  assert.match(out, new RegExp(`<!-- bench:table:docs from=${a} -->\nRun of 2026-12-01 12:50 UTC`));
  assert.match(out, new RegExp(`<!-- bench:table:retention from=${b} -->\nRun of 2026-12-02 01:00 UTC[\\s\\S]*\\| x \\| 1 \\|`));
});

test('every section kind names a section label a section writes', () => {
  const sources = readdirSync(`${root}bench/sections`).filter((f) => f.endsWith('.ts')).map((f) => read(`bench/sections/${f}`));
  for (const label of Object.values(SECTION_KINDS)) assert.ok(sources.some((text) => text.includes(`'${label}'`)), `a section writes rows of "${label}"`);
});

test("the console's table (docs/console.md): the tables' sizes, one row per page with p50 and p95, every unmet target of the section, reads included; nothing of another section", () => {
  const ms = (what: string, value: string, met: boolean): Row => row('15. console', what, value, 'p95 < 200 ms', met);
  const run: RunSummary = {
    ...FULL,
    sectionsSelected: ['console'],
    sectionsCompleted: ['console'],
    sectionProblems: {},
    rows: [
      row('15. console', 'tables: outbox rows / unsent / parked keys / dead letters', '10,000,000 / 200,500 / 100 / 1,000,000'),
      row('15. console', 'tables: size on disk with indexes, outbox / dead letters (MB); build time (s)', '2,100 / 420; 610'),
      ms('read: dead letters of a topic, first page, ms p50 / p95', '1.6 / 2.2', true),
      ms('read: overview (readOverview: backlog, oldest, counts, groups, relays, flow), ms p50 / p95', '180.0 / 240.5', false),
      ms('page: overview, ms p50 / p95', '190.2 / 260.1', false),
      ms('page: dead letters whose reason contains \'"h13"\' (0.01%), ms p50 / p95', '9.2 / 39.7', true),
      ms('page: a | in a name, ms p50 / p95', '1.0 / 2.0', true),
      row('2. drain', 'relay / ceiling 1', '0.49', '≥ 0.6', false),
    ],
  };
  const text = renderBlock('console', run, 'bench/committed/c.json');
  assert.match(text, /^Run of 2026-12-01 12:50 UTC, .*sections console\./);
  assert.match(text, /\n- outbox rows \/ unsent \/ parked keys \/ dead letters: 10,000,000 \/ 200,500 \/ 100 \/ 1,000,000\n- size on disk with indexes, outbox \/ dead letters \(MB\); build time \(s\): 2,100 \/ 420; 610\n/);
  const table = text.split('\n').filter((l) => l.startsWith('| '));
  assert.deepEqual(table, [
    '| page | p50, ms | p95, ms | target | met |',
    '| overview | 190.2 | 260.1 | p95 < 200 ms | **no** |',
    '| dead letters whose reason contains \'"h13"\' (0.01%) | 9.2 | 39.7 | p95 < 200 ms | yes |',
    '| a \\| in a name | 1.0 | 2.0 | p95 < 200 ms | yes |',
  ], 'one row per page, no read, no other section');
  assert.match(text, /Not met in this run:\n\n- 15\. console, read: overview .*: 180\.0 \/ 240\.5 \(target p95 < 200 ms\)\n- 15\. console, page: overview, ms p50 \/ p95: 190\.2 \/ 260\.1 \(target p95 < 200 ms\)$/);
  assert.ok(!text.includes('ceiling'), 'no row of another section');

  // A run without the section says so; rows it cannot read as pages fail the rendering.
  assert.match(renderBlock('console', FULL, 'bench/committed/x.json'), /^No committed run has timed the console's pages yet: `bench\/committed\/x\.json` has no rows of section "15\. console" \(its sections: ceilings, drain, cost, multioutbox\)\.$/);
  const rowsWith = (rows: Row[]): RunSummary => ({ ...run, rows });
  assert.throws(() => renderBlock('console', rowsWith([ms('page: overview, ms p50 / p95', '190 ms', true)]), 'f'), /console row "page: overview, ms p50 \/ p95" is not a page's "p50 \/ p95"/);
  assert.throws(() => renderBlock('console', rowsWith([ms('page: overview, ms p99', '1 / 2', true)]), 'f'), /is not a page's/);
  assert.throws(() => renderBlock('console', rowsWith([ms('pages: overview, ms p50 / p95', '1 / 2', true)]), 'f'), /has no "page: …" rows/);
});

test("the console section writes the rows the console's table reads: page and read timings as `<kind>: <what>, ms p50 / p95`, the tables' sizes as `tables: `", () => {
  const source = read('bench/sections/console.ts');
  assert.ok(source.includes("`${kind}: ${what}, ms p50 / p95`"), 'timings labelled <kind>: <what>, ms p50 / p95');
  assert.ok(source.includes("timed('page', what, p)") && source.includes("timed('read', what, "), 'pages and reads both timed as rows');
  assert.ok(source.includes("'tables: outbox rows / unsent / parked keys / dead letters'"), 'the sizes row');
});

test("the console's heavy-rows table (docs/console.md): one row per page with time, size and what it cost, 'not recorded' for a run without costs, the unmet heavy targets only", () => {
  const page = (what: string, value: string, met: boolean): Row => row('15. console', `heavy rows, page: ${what}, ms p50 / p95; KB largest`, value, 'p95 < 500 ms, < 200 KB', met);
  const cost = (what: string, value: string): Row => row('15. console', `heavy rows, cost: ${what}, CPU ms a page, bench process / Postgres; its reads alone, ms p50 / p95; load1 at start / end`, value);
  const run = (rows: Row[]): RunSummary => ({ ...FULL, sectionsSelected: ['console'], sectionsCompleted: ['console'], sectionProblems: {}, rows });
  const text = renderBlock('consoleheavy', run([
    row('15. console', 'heavy rows: dead letters / of them with a 1 MB payload / 1 MB rows on the first page; build (s)', '200,000 / 60 / 10; 13'),
    page('dead letters, first page', '17.7 / 51.0; 33.1', true),
    page('a | deep page', '34.8 / 776.8; 34.2', false),
    cost('dead letters, first page', '4.5 / 5.5; 6.1 / 17.1; 3.8 / 3.8'),
    row('15. console', 'page: overview, ms p50 / p95', '190.2 / 260.1', 'p95 < 200 ms', false),
  ]), 'bench/committed/h.json');
  assert.match(text, /^Run of 2026-12-01 12:50 UTC, .*sections console\./);
  assert.match(text, /\n- dead letters \/ of them with a 1 MB payload \/ 1 MB rows on the first page; build \(s\): 200,000 \/ 60 \/ 10; 13\n/);
  assert.deepEqual(text.split('\n').filter((l) => l.startsWith('| ')), [
    '| page | p50, ms | p95, ms | KB largest | target | met | CPU ms a page, process / Postgres | its reads alone, p50 / p95, ms | load1 at start / end |',
    '| dead letters, first page | 17.7 | 51.0 | 33.1 | p95 < 500 ms, < 200 KB | yes | 4.5 / 5.5 | 6.1 / 17.1 | 3.8 / 3.8 |',
    '| a \\| deep page | 34.8 | 776.8 | 34.2 | p95 < 500 ms, < 200 KB | **no** | not recorded | not recorded | 1.5 (at the end) |',
  ]);
  assert.match(text, /Not met in this run:\n\n- 15\. console, heavy rows, page: a \| deep page, .*: 34\.8 \/ 776\.8; 34\.2 \(target p95 < 500 ms, < 200 KB\)$/);
  assert.ok(!text.includes('overview'), 'no row of the big tables');
  assert.match(renderBlock('consoleheavy', run([page('p', '1 / 2; 3', true), row('15. console', 'page: overview, ms p50 / p95', '1 / 300', 'p95 < 200 ms', false)]), 'f'), /\nEvery heavy-rows target in this run was met\.$/);
  assert.match(renderBlock('consoleheavy', FULL, 'bench/committed/x.json'), /has no heavy-rows pages of section "15\. console"/);
  assert.throws(() => renderBlock('consoleheavy', run([page('p', '1 / 2', true)]), 'f'), /is not a heavy-rows page's/);
  assert.throws(() => renderBlock('consoleheavy', run([page('p', '1 / 2; 3', true), cost('p', '1 / 2')]), 'f'), /is not a page's cost/);
});
