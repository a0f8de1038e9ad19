/**
 * The benchmark tables of README.md, docs/benchmarks.md and docs/console.md, written from a
 * committed run summary (bench/summary.ts) and never by hand. A table sits between
 *
 *   <!-- bench:table:<kind> from=bench/committed/<file>.json -->
 *   <!-- /bench:table -->
 *
 * and is whatever `renderBlock(kind, <that file>)` gives: the run's date, profile, commit,
 * machine and load, the rows (README: every row with a target and a few for context; docs:
 * every row), and every target not met. `npm run bench:tables` (bench/writeTables.ts)
 * rewrites them; test/unit/benchTables.test.ts fails when a file's table differs from its
 * rendering, names a summary that does not exist, or when a figure in README's
 * performance section stands outside a table.
 */
import type { Row } from './report.js';
import { describeRan, distinctArms } from './armFacts.js';
import type { RunSummary } from './summary.js';

/** The files with tables, relative to the repository root. */
export const TABLE_FILES = ['README.md', 'docs/benchmarks.md', 'docs/console.md'] as const;

export const KINDS = ['readme', 'docs', 'drain', 'consumer', 'retention', 'pooler', 'effects', 'console', 'consoleheavy', 'exactlyonce', 'heldhorizon', 'tenants', 'encodings'] as const;
export type Kind = (typeof KINDS)[number];

/**
 * Kinds that render one section's rows (the section label their rows carry), for a page
 * that explains that section: each names its own summary, so a run of that section alone
 * (`--only retention`) can feed it while the other tables keep theirs.
 */
export const SECTION_KINDS: Partial<Record<Kind, string>> = {
  drain: '2. drain',
  consumer: '4. consumer',
  retention: '12. retention',
  pooler: '13. pooled mode',
  effects: '14. effect guard',
  console: '15. console',
  consoleheavy: '15. console',
  exactlyonce: '16. exactly-once',
  heldhorizon: '18. held horizon',
  tenants: '19. many tenants',
  encodings: '20. encodings',
};

/**
 * Rows without a target that README shows for context, by section and the start of their
 * label (labels go on with the run's sizes, which differ between profiles).
 */
export const README_CONTEXT: Array<[section: string, whatStartsWith: string]> = [
  ['1. ceilings', 'raw kafkajs producer'],
  ['1. ceilings', 'raw @platformatic/kafka producer'],
  ['2. drain', 'relay, producer kafkajs, otherwise defaults'],
  ['7. cost', 'outbox, relay polling another schema'],
  ['11. many outboxes', 'one process / 4 processes:'],
];

/**
 * What was found afterwards about committed runs that did not record what their arms ran
 * on, by result file: the tables say it beside the run. Runs between cb769e2 (platformatic
 * the relay's default) and e01a881 labelled their child relays "platformatic" or
 * "defaults", but bench/child.ts handed each its recording kafkajs client and no
 * producer, and a relay given a kafkajs client and no producer publishes through it.
 */
const KAFKAJS_IN_CHILDREN =
  'Found afterwards (issue 33): every relay this run started in a child process (sections drain, latency, scale, peer, cost, relaycost, debezium, retention, pooler) ran the kafkajs client, whatever its row says: bench/child.ts handed each relay a kafkajs client and no producer until e01a881. Rows naming platformatic or the defaults for those relays are kafkajs figures; the ceilings, the consumer and the real command (many outboxes) are not affected.';
export const RAN_NOTES: Record<string, string> = {
  'bench/committed/2026-12-02T07-00-05-646Z-full.json': KAFKAJS_IN_CHILDREN,
  'bench/committed/2026-12-03T06-46-31-049Z-full.json': KAFKAJS_IN_CHILDREN,
  'bench/committed/2026-12-03T07-37-53-504Z-full.json': KAFKAJS_IN_CHILDREN,
};

/**
 * A row's "ran" cell: its arms as they reported themselves; a dash for a row of no Kafka
 * client (Postgres, Redis) in a run that records them; "not recorded" in one that did not.
 */
function ranCell(r: Row, s: RunSummary): string {
  if (r.ran !== undefined && r.ran.length > 0) return describeRan(r.ran);
  return s.rows.some((x) => x.ran !== undefined) ? '–' : 'not recorded';
}

/** What the run's rows say about what ran: Node and our commit as the arms reported them, or that they were not recorded. */
function ranLine(s: RunSummary, from: string): string {
  const arms = distinctArms(s.rows.flatMap((r) => r.ran ?? []));
  const note = RAN_NOTES[from] ? ` ${RAN_NOTES[from]}` : '';
  if (arms.length === 0) return `This run did not record which client each arm ran on (runs record it since issue 33).${note}`;
  const nodes = [...new Set(arms.map((a) => a.node))].join(', ');
  const commits = [...new Set(arms.map((a) => a.commit ?? 'not recorded'))].join(', ');
  return `Column "ran": the client, its version and the delivery mode each row's relays and consumers reported when they started (a run fails when a row's label names another); they reported Node ${nodes}, commit ${commits}.${note}`;
}

const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');

const met = (r: Row): string => (r.target === undefined ? '' : r.met ? 'yes' : '**no**');

/** `2026-12-01T20:31:02.117Z` → `2026-12-01 20:31 UTC`. */
const utc = (iso: string): string => `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;

function loadRange(rows: Row[]): string {
  const loads = rows.map((r) => r.load1);
  const lo = Math.min(...loads);
  const hi = Math.max(...loads);
  return lo === hi ? `${lo}` : `${lo}-${hi}`;
}

/** The run in one plain paragraph: when, which profile and sections, on what, at what load. */
export function describeRun(s: RunSummary, from: string): string {
  const seconds = Math.round((Date.parse(s.finishedAt) - Date.parse(s.startedAt)) / 1000);
  const took = seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
  const commit = s.commit ? `commit ${s.commit.hash.slice(0, 7)}${s.commit.dirty ? ' with uncommitted changes' : ''}` : 'commit not recorded';
  const m = s.machine;
  const profile =
    s.profile === 'quick'
      ? '`npm run bench -- --quick` (quick profile: small sizes, on a machine shared with other work, so the figures are noisy and are not the measurement of the targets)'
      : `\`npm run bench\` (${s.profile} profile)`;
  const problems = Object.entries(s.sectionProblems);
  const lines = [
    `Run of ${utc(s.startedAt)}, ${took}, ${profile}, on ${commit}; sections ${s.sectionsSelected.join(', ')}.`,
    `Machine: ${m.cpus} cores (${m.cpuModel ?? 'model unknown'}), ${m.memoryGiB} GiB, Node ${m.node}, PostgreSQL ${m.postgres ?? 'unknown'};`,
    `1-minute load average ${loadRange(s.rows)} while the rows came in. Result file: \`${from}\`.`,
    ranLine(s, from),
  ];
  if (problems.length > 0) lines.push(`Sections without a result in this run: ${problems.map(([name, why]) => `${name} (${why})`).join('; ')}.`);
  return lines.join('\n');
}

/** Every target the run did not meet, as a list, or a line saying there is none. */
export function notMet(s: RunSummary): string {
  const missed = s.rows.filter((r) => r.target !== undefined && !r.met);
  if (missed.length === 0) return 'Every target in this run was met.';
  return ['Not met in this run:', '', ...missed.map((r) => `- ${r.section}, ${r.what}: ${r.value} (target ${r.target})`)].join('\n');
}

export function readmeRows(rows: Row[]): Row[] {
  return rows.filter((r) => r.target !== undefined || README_CONTEXT.some(([section, start]) => r.section === section && r.what.startsWith(start)));
}

/**
 * The console's page on big tables (docs/console.md): the run, the tables' sizes, one row
 * per page timed over HTTP (the section's `page: <page>, ms p50 / p95` rows), and every
 * target of the section not met (the data-layer reads' too).
 */
function renderConsole(s: RunSummary, from: string, rows: Row[]): string {
  if (rows.length === 0) {
    return `No committed run has timed the console's pages yet: \`${from}\` has no rows of section "${SECTION_KINDS.console}" (its sections: ${s.sectionsSelected.join(', ')}).`;
  }
  const pages = rows.filter((x) => x.what.startsWith('page: '));
  // A section that ran always times pages: none means their rows were renamed.
  if (pages.length === 0) throw new Error(`${from}: section "${SECTION_KINDS.console}" has no "page: …" rows`);
  const out = [describeRun(s, from), ''];
  for (const r of rows.filter((x) => x.what.startsWith('tables: '))) out.push(`- ${cell(r.what.slice('tables: '.length))}: ${cell(r.value)}`);
  out.push('', '| page | p50, ms | p95, ms | target | met |', '|---|---:|---:|---|---|');
  for (const r of pages) {
    const m = /^(\S+) \/ (\S+)$/.exec(r.value);
    if (!m || !r.what.endsWith(', ms p50 / p95')) throw new Error(`${from}: console row "${r.what}" is not a page's "p50 / p95" in ms (value ${r.value})`);
    out.push(`| ${cell(r.what.slice('page: '.length, -', ms p50 / p95'.length))} | ${m[1]} | ${m[2]} | ${cell(r.target ?? '')} | ${met(r)} |`);
  }
  out.push('', notMet({ ...s, rows }));
  return out.join('\n');
}

const HEAVY_PAGE = 'heavy rows, page: ';
const HEAVY_PAGE_END = ', ms p50 / p95; KB largest';
const HEAVY_COST = 'heavy rows, cost: ';
const HEAVY_COST_END = ', CPU ms a page, bench process / Postgres; its reads alone, ms p50 / p95; load1 at start / end';

/**
 * The console's list pages over 1 MB rows (docs/console.md, "Heavy rows"): one row per
 * page with its time over HTTP, its size, and what it cost (CPU a page, its reads alone,
 * the load while it was timed) where the run recorded that; then the section's unmet
 * heavy-rows targets.
 */
function renderConsoleHeavy(s: RunSummary, from: string, rows: Row[]): string {
  const pages = rows.filter((r) => r.what.startsWith(HEAVY_PAGE));
  if (pages.length === 0) return `The run in \`${from}\` has no heavy-rows pages of section "${SECTION_KINDS.consoleheavy}" (its sections: ${s.sectionsSelected.join(', ')}).`;
  const out = [describeRun(s, from), ''];
  for (const r of rows.filter((x) => x.what.startsWith('heavy rows: '))) out.push(`- ${cell(r.what.slice('heavy rows: '.length))}: ${cell(r.value)}`);
  out.push(
    '',
    '| page | p50, ms | p95, ms | KB largest | target | met | CPU ms a page, process / Postgres | its reads alone, p50 / p95, ms | load1 at start / end |',
    '|---|---:|---:|---:|---|---|---|---|---|',
  );
  for (const r of pages) {
    const m = /^(\S+) \/ (\S+); (\S+)$/.exec(r.value);
    if (!m || !r.what.endsWith(HEAVY_PAGE_END)) throw new Error(`${from}: console row "${r.what}" is not a heavy-rows page's "p50 / p95; KB" (value ${r.value})`);
    const page = r.what.slice(HEAVY_PAGE.length, -HEAVY_PAGE_END.length);
    const cost = rows.find((x) => x.what === `${HEAVY_COST}${page}${HEAVY_COST_END}`);
    const c = cost ? /^(\S+ \/ \S+); (\S+ \/ \S+); (\S+ \/ \S+)$/.exec(cost.value) : null;
    if (cost && !c) throw new Error(`${from}: console row "${cost.what}" is not a page's cost (value ${cost.value})`);
    const [cpu, reads, load] = c ? [c[1]!, c[2]!, c[3]!] : ['not recorded', 'not recorded', `${r.load1} (at the end)`];
    out.push(`| ${cell(page)} | ${m[1]} | ${m[2]} | ${m[3]} | ${cell(r.target ?? '')} | ${met(r)} | ${cpu} | ${reads} | ${load} |`);
  }
  const missed = notMet({ ...s, rows: pages });
  // The section's other targets (the big tables) are in the console table or the result file.
  out.push('', missed.startsWith('Every target') ? 'Every heavy-rows target in this run was met.' : missed);
  return out.join('\n');
}

/** What goes between a block's markers (without the markers). */
export function renderBlock(kind: Kind, s: RunSummary, from: string): string {
  const sectionLabel = SECTION_KINDS[kind];
  if (sectionLabel !== undefined) {
    const rows = s.rows.filter((r) => r.section === sectionLabel);
    if (kind === 'console') return renderConsole(s, from, rows);
    if (kind === 'consoleheavy') return renderConsoleHeavy(s, from, rows);
    if (rows.length === 0) return `The run in \`${from}\` has no rows of section "${sectionLabel}" (its sections: ${s.sectionsSelected.join(', ')}).`;
    const out = [describeRun(s, from), '', '| what | result | target | met | ran | load |', '|---|---|---|---|---|---:|'];
    for (const r of rows) out.push(`| ${cell(r.what)} | ${cell(r.value)} | ${cell(r.target ?? '')} | ${met(r)} | ${cell(ranCell(r, s))} | ${r.load1} |`);
    out.push('', notMet({ ...s, rows }));
    return out.join('\n');
  }
  const out = [describeRun(s, from), ''];
  if (kind === 'readme') {
    out.push('| figure | result | target | met | ran |', '|---|---|---|---|---|');
    for (const r of readmeRows(s.rows)) out.push(`| ${cell(`${r.section}: ${r.what}`)} | ${cell(r.value)} | ${cell(r.target ?? '')} | ${met(r)} | ${cell(ranCell(r, s))} |`);
  } else {
    out.push('| section | what | result | target | met | ran | load |', '|---|---|---|---|---|---|---:|');
    for (const r of s.rows) out.push(`| ${cell(r.section)} | ${cell(r.what)} | ${cell(r.value)} | ${cell(r.target ?? '')} | ${met(r)} | ${cell(ranCell(r, s))} | ${r.load1} |`);
  }
  out.push('', notMet(s));
  return out.join('\n');
}

export interface Block {
  kind: Kind;
  from: string;
  /** The text between the opening marker's line and the closing marker. */
  body: string;
  /** Offsets of the body in the file. */
  start: number;
  end: number;
}

const OPEN = /<!-- bench:table:(\S+?) from=(\S+) -->\n/g;
const CLOSE = '<!-- /bench:table -->';

/** The marked blocks of a file; throws on an unknown kind, a marker without its end, or a nested marker. */
export function findBlocks(text: string, file: string): Block[] {
  const blocks: Block[] = [];
  const openings = [...text.matchAll(OPEN)];
  const loose = (text.match(/<!-- bench:table/g) ?? []).length;
  if (loose !== openings.length) throw new Error(`${file}: a "<!-- bench:table" marker not of the form <!-- bench:table:<kind> from=<file> -->`);
  for (const [i, m] of openings.entries()) {
    const kind = m[1]!;
    if (!(KINDS as readonly string[]).includes(kind)) throw new Error(`${file}: unknown table kind "${kind}" (known: ${KINDS.join(', ')})`);
    const start = m.index + m[0].length;
    const end = text.indexOf(CLOSE, start);
    const next = openings[i + 1]?.index ?? Infinity;
    if (end < 0 || end > next) throw new Error(`${file}: the table from ${m[2]} has no ${CLOSE} before the next one or the end`);
    blocks.push({ kind: kind as Kind, from: m[2]!, body: text.slice(start, end), start, end });
  }
  if ((text.match(/<!-- \/bench:table -->/g) ?? []).length !== blocks.length) throw new Error(`${file}: a ${CLOSE} without its opening marker`);
  return blocks;
}

/**
 * The file with every block rewritten from the summary it names (or from `from`, which
 * then becomes the name in every marker, or in those of the `kinds` given).
 */
export function regenerate(text: string, file: string, load: (from: string) => RunSummary, from?: string, kinds?: readonly Kind[]): string {
  let out = '';
  let at = 0;
  for (const b of findBlocks(text, file)) {
    const source = from !== undefined && (kinds === undefined || kinds.includes(b.kind)) ? from : b.from;
    const head = text.slice(at, b.start).replace(/(<!-- bench:table:\S+? from=)\S+( -->\n)$/, `$1${source}$2`);
    out += `${head}${renderBlock(b.kind, load(source), source)}\n`;
    at = b.end;
  }
  return out + text.slice(at);
}

/** The text with the blocks (markers included) and inline code taken out. */
function outsideBlocks(text: string): string {
  return text.replace(/<!-- bench:table:[\s\S]*?<!-- \/bench:table -->/g, '').replace(/`[^`\n]*`/g, '');
}

/** A `## ` section of a Markdown file, from its heading to the next `## ` heading. */
export function section(text: string, heading: string): string | undefined {
  const start = text.indexOf(`\n## ${heading}\n`);
  if (start < 0) return undefined;
  const end = text.indexOf('\n## ', start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/**
 * Lines of `text` with a digit outside the tables and inline code: in README's
 * performance section every figure is in a generated table, so there are none.
 */
export function strayFigures(text: string): string[] {
  return outsideBlocks(text)
    .split('\n')
    .filter((line) => /\d/.test(line.replace(/<!--[\s\S]*?-->/g, '')));
}

/** Units that only a measurement carries here: a throughput, a CPU cost, a memory size, a share of a core. */
const MEASUREMENT = /\d[\d,.]*\s*[kM]?\s*(rows\/s|messages\/s|msg\/s|tps\b|CPU-s|MiB|% of a core)/;

/** An offered load ("at 1,000 rows/s", "offering 50 rows/s", "5,000 rows/s offered"): a setting of the run, not a result. */
const OFFERED_LOAD = /\b(at|offering) [\d,.]+ rows\/s|[\d,.]+ rows\/s offered/gi;

/** Lines outside the tables and inline code that state a measurement (by its unit). */
export function strayMeasurements(text: string): string[] {
  return outsideBlocks(text)
    .split('\n')
    .filter((line) => MEASUREMENT.test(line.replace(OFFERED_LOAD, '')));
}
