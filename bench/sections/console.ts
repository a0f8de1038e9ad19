/**
 * 15. Console (issue 22): the operator console on big tables, p50 and p95 against the
 * target, p95 below 200 ms, in two ways:
 *
 * - `page`: every page a user opens, over HTTP from the real console (startConsole)
 *   logged in as an operator, request to last byte (bench/consolePages.ts);
 * - `read`: each read of the console's data layer alone, one at a time.
 *
 * The tables (bench/consoleTables.ts): `outboxRows` outbox rows (10,000,000 in the full
 * profile) with a backlog and parked keys, and `deadLetters` dead letters (1,000,000).
 * Each query rotates its parameters (topics, keys, error names, pages deep into the list)
 * so that it is not one cached row set. The section checks itself: the tables hold what
 * they should, every read's answer matches its filter (a page of a topic has only that
 * topic, a deep page starts after its cursor, counts are capped where the tables are
 * bigger than the cap), and every page answers 200 with exactly the rows the tables say
 * it must show; a page or read not timed, or one wrong answer, fails the section.
 */
import type pg from 'pg';
import { BACKLOG_CAP, DEAD_LETTER_CAP, readOverview } from '../../src/console/data/overview.js';
import { countDeadLetters, readDeadLetter, searchDeadLetters } from '../../src/console/data/deadLetters.js';
import { WAITING_SCAN, listParkedKeys } from '../../src/console/data/parkedKeys.js';
import type { ConsoleDeadLetterFilter, DeadLetterPage, ParkedKeyPage } from '../../src/console/model.js';
import { CONSOLE_ERROR_NAMES, CONSOLE_TOPICS, buildConsoleTables, type ConsoleTableSizes, type ConsoleTables } from '../consoleTables.js';
import { timeConsolePages, type PageTiming } from '../consolePages.js';
import { row, type SectionResult } from '../report.js';
import { timeHeavyPages, type HeavyOptions, type HeavyResult } from '../consoleHeavy.js';
import { fmt, log, percentiles, type Percentiles } from '../util.js';

const S = '15. console';
const TARGET_MS = 200;
const HEAVY_TARGET_MS = 500;
const HEAVY_TARGET_KB = 200;
const PAGE = 50;

export interface ConsoleOptions {
  outboxRows: number;
  deadLetters: number;
  /** Times each read and each page is timed (after one warm-up for a read, three for a page). */
  repeats: number;
  /** The list pages over heavy rows (bench/consoleHeavy.ts). */
  heavy: HeavyOptions;
}

export interface ConsoleData {
  sizes: ConsoleTableSizes;
  buildSeconds: number;
  bytes: ConsoleTables['bytes'];
  /** Milliseconds per call: `read`, a data-layer call; `page`, a page over HTTP. */
  timings: Array<{ kind: 'read' | 'page'; what: string } & Percentiles & { calls: number } & Partial<Pick<PageTiming, 'example' | 'bytes'>>>;
  /** The walks along "Next page" links to the deep pages (not timed as pages). */
  walks: Record<string, { pages: number; msP50: number; msP95: number }>;
  /** The list pages over 1 MB rows (issue 33). */
  heavy?: HeavyResult;
}

/** Warm-up requests of each page (a read has one). */
const PAGE_WARM_UPS = 3;
/** The deep pages timed lie this far into their list (as the reads' deep pages do). */
const DEEP_FROM = 0.5;
const DEEP_TO = 0.95;

type Check = (ok: boolean, what: string) => void;

/** The queries timed: name, and one call (the i-th) that checks its own answer. */
function queries(pool: pg.Pool, t: ConsoleTables, check: Check): Array<[string, (i: number) => Promise<unknown>]> {
  const schema = t.schema;
  const { first, last } = t.deadLetterIds;
  const span = last - first;
  const topic = (i: number): string => CONSOLE_TOPICS[i % CONSOLE_TOPICS.length]!;
  const name = (i: number): string => CONSOLE_ERROR_NAMES[i % CONSOLE_ERROR_NAMES.length]![0];
  const key = (i: number): string => `key-${(i * 7919) % 50_000}`;
  const deep = (i: number): number => first + Math.floor(span * (0.5 + 0.45 * ((i * 37) % 100) / 100));
  const hour = 3_600_000;
  const to = t.deadLetteredTo.getTime();
  const search = async (what: string, f: ConsoleDeadLetterFilter, afterId: number | null, matches: (d: DeadLetterPage['deadLetters'][number]) => boolean, nonEmpty = true): Promise<DeadLetterPage> => {
    const page = await searchDeadLetters(pool, schema, f, { afterId, limit: PAGE });
    check(page.deadLetters.every(matches), `${what}: every row matches`);
    check(page.deadLetters.every((d, j, a) => (afterId === null || d.id > afterId) && (j === 0 || a[j - 1]!.id < d.id)), `${what}: ids ascend after the cursor`);
    if (nonEmpty) check(page.deadLetters.length > 0 && page.matching.count >= page.deadLetters.length, `${what}: found rows`);
    return page;
  };
  const unsent = t.sizes.unsentRows + t.sizes.parkedKeys * t.sizes.waitingPerKey;
  let second: ParkedKeyPage['next'] = null;
  const parkedPage = async (next: boolean): Promise<void> => {
    const page = await listParkedKeys(pool, schema, { after: next ? second : null, limit: PAGE });
    if (!next) second = page.next;
    const want = next ? Math.min(PAGE, Math.max(0, t.sizes.parkedKeys - PAGE)) : Math.min(PAGE, t.sizes.parkedKeys);
    // Their old rows, and any of the backlog; capped when the backlog is longer than the scan.
    check(page.parkedKeys.length === want && page.parkedKeys.every((p) => p.waiting.count >= t.sizes.waitingPerKey || p.waiting.capped) && page.parkedKeys.every((p) => p.waiting.capped === unsent >= WAITING_SCAN), 'parked keys and their waiting rows');
  };
  return [
    ['overview (readOverview: backlog, oldest, counts, groups, relays, flow)', async () => {
      const o = await readOverview(pool, { name: 'bench', schema });
      const unsent = t.sizes.unsentRows + t.sizes.parkedKeys * t.sizes.waitingPerKey;
      check(o.backlog.capped === unsent > BACKLOG_CAP && o.backlog.count === Math.min(unsent, BACKLOG_CAP) && (!o.backlog.capped || (o.backlog.estimate ?? 0) > BACKLOG_CAP), 'overview: backlog');
      check(o.deadLetters.total.capped === t.sizes.deadLetters > DEAD_LETTER_CAP && (!o.deadLetters.total.capped || (o.deadLetters.total.estimate ?? 0) > DEAD_LETTER_CAP), 'overview: dead letters capped, with an estimate');
      check(o.deadLetters.byTopic.length === CONSOLE_TOPICS.length && o.deadLetters.byReason.length > 0, 'overview: groups');
      // The build wrote the two hours before it ended; minutes since are not recorded.
      const recorded = o.flow.filter((m) => m.recorded);
      check(o.flow.length === 60 && recorded.length >= 50 && recorded.every((m) => m.egress === 6_000 && m.ingress === 6_000), 'overview: flow');
      check(o.relays.length === 1 && o.relays[0]!.shardCount === 256, 'overview: relay');
    }],
    ['dead letters, no filter, first page', () => search('first page', {}, null, () => true)],
    ['dead letters, no filter, a page deep in the list (afterId)', (i) => search('deep page', {}, deep(i), () => true)],
    ['dead letters of a topic, first page', (i) => search('topic', { topic: topic(i) }, null, (d) => d.topic === topic(i))],
    ['dead letters of a topic, a page deep in the list', (i) => search('topic, deep', { topic: topic(i) }, deep(i), (d) => d.topic === topic(i))],
    ['dead letters of a key', (i) => search('key', { key: key(i) }, null, (d) => d.key === key(i))],
    ['dead letters of an error name (1% to 60% of them)', (i) => search('error name', { errorName: name(i) }, null, (d) => d.errorName === name(i))],
    ['dead letters whose reason contains "bytes" (85%)', () => search('reason, common', { reason: 'bytes' }, null, (d) => d.reason.toLowerCase().includes('bytes'))],
    // header "h13" is in 1 of every 9,700 reasons: the pages read far to fill up.
    ['dead letters whose reason contains \'"h13"\' (0.01%)', () => search('reason, rare', { reason: '"h13"' }, null, (d) => d.reason.includes('"h13"'))],
    ['dead letters of the last hour of them (since, until)', () =>
      search('last hour', { since: new Date(to - hour), until: new Date(to + 1) }, null, (d) => d.deadLetteredAt.getTime() >= to - hour)],
    ['dead letters of one hour 20 days back', (i) => {
      const from = to - (20 * 24 + (i % 24)) * hour;
      return search('old hour', { since: new Date(from), until: new Date(from + hour) }, null, (d) => d.deadLetteredAt.getTime() >= from && d.deadLetteredAt.getTime() < from + hour);
    }],
    ['dead letters of 7 days, a page deep in them', (i) => {
      const from = to - 14 * 24 * hour;
      return search('7 days deep', { since: new Date(from), until: new Date(from + 7 * 24 * hour) }, deep(i), () => true, false);
    }],
    ['dead letters of a topic and an error name in the last 3 days', (i) =>
      search('topic+name+since', { topic: topic(i), errorName: name(i % 3), since: new Date(to - 72 * hour) }, null, (d) => d.topic === topic(i) && d.errorName === name(i % 3))],
    ['dry-run count of a topic, cap 10,000 (countDeadLetters)', async (i) => {
      const c = await countDeadLetters(pool, schema, { topic: topic(i) }, 10_000);
      check(c.capped === t.sizes.deadLetters / CONSOLE_TOPICS.length > 10_000, 'count: capped');
    }],
    ['one dead letter whole (readDeadLetter)', async (i) => {
      const id = first + ((i * 104_729) % (span + 1));
      check((await readDeadLetter(pool, schema, id))?.id === id, 'read one');
    }],
    ['parked keys, first page of 50, with rows waiting', () => parkedPage(false)],
    ['parked keys, second page of 50 (after the first\'s cursor)', () => parkedPage(true)],
  ];
}

export async function consoleSection(pool: pg.Pool, o: ConsoleOptions): Promise<SectionResult<ConsoleData>> {
  const sizes: ConsoleTableSizes = {
    outboxRows: o.outboxRows,
    unsentRows: Math.max(1_000, Math.floor(o.outboxRows / 50)),
    parkedKeys: 100,
    waitingPerKey: 5,
    deadLetters: o.deadLetters,
  };
  // First the heavy rows (issue 33), in tables of their own: every list page p95 < 500 ms and < 200 KB.
  const heavyProblems: string[] = [];
  const heavy = await timeHeavyPages(pool, o.heavy, (ok, what) => {
    if (!ok && heavyProblems.length < 20) heavyProblems.push(what);
  });
  if (heavyProblems.length > 0) throw new Error(`console section, heavy rows: ${heavyProblems.join('; ')}`);
  const heavyRows = [
    row(S, 'heavy rows: dead letters / of them with a 1 MB payload / 1 MB rows on the first page; build (s)', `${fmt(heavy.deadLetters)} / ${fmt(heavy.heavyRows)} / ${fmt(heavy.heavyOnFirstPage)}; ${fmt(heavy.buildSeconds)}`),
    ...Object.entries(heavy.pages).map(([what, p]) =>
      row(S, `heavy rows, page: ${what}, ms p50 / p95; KB largest`, `${fmt(p.p50, 1)} / ${fmt(p.p95, 1)}; ${fmt(p.maxBytes / 1000, 1)}`, `p95 < ${HEAVY_TARGET_MS} ms, < ${HEAVY_TARGET_KB} KB`, p.p95 < HEAVY_TARGET_MS && p.maxBytes < HEAVY_TARGET_KB * 1000),
    ),
    // What each page costs, whatever the machine's load: CPU per page and its reads alone.
    ...Object.entries(heavy.pages).map(([what, p]) =>
      row(
        S,
        `heavy rows, cost: ${what}, CPU ms a page, bench process / Postgres; its reads alone, ms p50 / p95; load1 at start / end`,
        `${fmt(p.cpuMs.process, 1)} / ${fmt(p.cpuMs.postgres, 1)}; ${fmt(p.read.p50, 1)} / ${fmt(p.read.p95, 1)}; ${p.load1[0]} / ${p.load1[1]}`,
      ),
    ),
  ];
  log(`${S}: heavy rows: ${Object.keys(heavy.pages).length} pages timed`);
  const t = await buildConsoleTables(pool, sizes);
  try {
    const problems: string[] = [];
    const check: Check = (ok, what) => {
      if (!ok && problems.length < 20) problems.push(what);
    };
    const data: ConsoleData = { sizes, buildSeconds: t.buildSeconds, bytes: t.bytes, timings: [], walks: {}, heavy };
    const rows = [
      ...heavyRows,
      row(S, 'tables: outbox rows / unsent / parked keys / dead letters', `${fmt(sizes.outboxRows)} / ${fmt(sizes.unsentRows + sizes.parkedKeys * sizes.waitingPerKey)} / ${fmt(sizes.parkedKeys)} / ${fmt(sizes.deadLetters)}`),
      row(S, 'tables: size on disk with indexes, outbox / dead letters (MB); build time (s)', `${fmt(t.bytes.outbox / 1e6)} / ${fmt(t.bytes.deadLetters / 1e6)}; ${fmt(t.buildSeconds)}`),
    ];
    const timed = (kind: 'read' | 'page', what: string, p: Percentiles & { calls: number }): void => {
      data.timings.push({ kind, what, ...p });
      rows.push(row(S, `${kind}: ${what}, ms p50 / p95`, `${fmt(p.p50, 1)} / ${fmt(p.p95, 1)}`, `p95 < ${TARGET_MS} ms`, p.p95 < TARGET_MS));
    };
    for (const [what, call] of queries(pool, t, check)) {
      await call(0); // warm-up: not timed
      const ms: number[] = [];
      for (let i = 1; i <= o.repeats; i++) {
        const started = performance.now();
        await call(i);
        ms.push(performance.now() - started);
      }
      timed('read', what, { ...percentiles(ms.sort((a, b) => a - b)), calls: o.repeats });
    }
    const pages = await timeConsolePages(pool, t, { repeats: o.repeats, warmUps: PAGE_WARM_UPS, deepFrom: DEEP_FROM, deepTo: DEEP_TO }, check);
    for (const [what, p] of Object.entries(pages.pages)) timed('page', what, p);
    data.walks = pages.walks;
    if (problems.length > 0) throw new Error(`console section: answers that do not match their query or page: ${problems.join('; ')}`);
    const count = (kind: string): number => data.timings.filter((x) => x.kind === kind).length;
    log(`${S}: ${count('read')} reads and ${count('page')} pages timed`);
    return { rows, data };
  } finally {
    await t.drop().catch(() => undefined);
  }
}
