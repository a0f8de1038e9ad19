/**
 * The console bench's pages (issue 22): the real console (startConsole) over the bench's
 * big tables, logged in as an operator over HTTP, and every page a user opens timed from
 * request to last byte: the overview, the dead-letter list unfiltered and under each
 * filter the data-layer bench times, a page deep in a list, one dead letter, the replay
 * and discard confirmations, the parked keys.
 *
 * A deep page is reached as a user reaches it: by following each page's "Next page" link
 * from the first page (a walk, not timed, that also checks the links lose and repeat no
 * row); the timed requests open links the walk collected, spread over the depths walked.
 *
 * Every answer is checked against the tables, read with plain SQL of its own (not the
 * console's queries): status 200, the page's heading, the ids of the dead letters shown
 * (exactly the ones expected, in order), the count line. A page that answers wrongly
 * is reported as a problem, so it cannot be fast by accident.
 */
import type pg from 'pg';
import { startConsole } from '../src/console/console.js';
import { BACKLOG_CAP, DEAD_LETTER_CAP } from '../src/console/data/overview.js';
import { MATCHING_CAP } from '../src/console/data/deadLetters.js';
import { DEAD_LETTER_PAGE_SIZE } from '../src/console/web/deadLettersPage.js';
import { PARKED_KEY_PAGE_SIZE } from '../src/console/web/parkedKeysPage.js';
import { PREVIEW_ROWS } from '../src/console/web/actionPages.js';
import { ACTION_CAP } from '../src/console/web/actionRoutes.js';
import { DATABASE_URL } from './common.js';
import { CONSOLE_ERROR_NAMES, CONSOLE_TOPICS, type ConsoleTables } from './consoleTables.js';
import { ConsoleBrowser, card, deadLetterIds, field, heading, linkStartingWith, nextLink, parkedKeyRows, signedInAs, statusCount, tableRows, type TimedPage } from './consoleHttp.js';
import { log, percentiles, type Percentiles } from './util.js';

const OUTBOX = 'bench';
const USER = 'operator';
const BASE = `/outboxes/${OUTBOX}/`;
const LIST = `${BASE}dead-letters`;

export interface ConsolePagesOptions {
  /** Timed requests of each page, after `warmUps` untimed ones. */
  repeats: number;
  warmUps: number;
  /** The deep pages timed lie between these fractions of the list (or of the 7 days' rows). */
  deepFrom: number;
  deepTo: number;
}

export interface PageTiming extends Percentiles {
  calls: number;
  /** One URL timed (path and query), for the reader. */
  example: string;
  /** Median size of the page, bytes. */
  bytes: number;
}

export interface ConsolePagesResult {
  pages: Record<string, PageTiming>;
  /** The untimed walks along "Next page" links that reached the deep pages. */
  walks: Record<string, { pages: number; msP50: number; msP95: number }>;
}

type Check = (ok: boolean, what: string) => void;

/** A dead-letter filter as the list's links carry it (times as ISO, UTC). */
interface Filter {
  topic?: string;
  key?: string;
  reason?: string;
  errorName?: string;
  since?: Date;
  until?: Date;
}

interface Page {
  what: string;
  url: (i: number) => Promise<string> | string;
  check: (page: TimedPage, i: number) => Promise<void>;
}

const query = (f: Filter): string => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v !== undefined) q.set(k, v instanceof Date ? v.toISOString() : v);
  const s = q.toString();
  return s ? `?${s}` : '';
};

/** A capped count as the pages write it. */
const shown = (count: number, cap: number): string => (count > cap ? `${cap.toLocaleString('en-US')}+` : count.toLocaleString('en-US'));

/**
 * What a page of `f` after `afterId` must show, from the table itself: the ids (lowest
 * first, at most `limit`) and how many match in all (counted to 10,001). Cached: the
 * tables do not change while the bench runs.
 */
function reference(pool: pg.Pool, schema: string) {
  const cache = new Map<string, Promise<{ ids: number[]; count: number }>>();
  return (f: Filter, afterId: number | null, limit: number): Promise<{ ids: number[]; count: number }> => {
    const id = JSON.stringify([f, afterId, limit]);
    let hit = cache.get(id);
    if (!hit) {
      const params: unknown[] = [];
      const p = (v: unknown): string => `$${params.push(v)}`;
      const where: string[] = [];
      if (f.topic !== undefined) where.push(`topic = ${p(f.topic)}`);
      if (f.key !== undefined) where.push(`md5(key) = md5(${p(f.key)}) AND key = $${params.length}`);
      if (f.errorName !== undefined) where.push(`error_name = ${p(f.errorName)}`);
      if (f.reason !== undefined) where.push(`(strpos(lower(reason), lower(${p(f.reason)})) > 0 OR strpos(lower(error_name), lower($${params.length})) > 0)`);
      if (f.since !== undefined) where.push(`dead_lettered_at >= ${p(f.since)}`);
      if (f.until !== undefined) where.push(`dead_lettered_at < ${p(f.until)}`);
      const all = where.length ? where.join(' AND ') : 'true';
      const after = afterId === null ? '' : ` AND id > ${p(afterId)}`;
      const sql = `SELECT ARRAY(SELECT id FROM "${schema}".outbox_dead_letters WHERE ${all}${after} ORDER BY id LIMIT ${p(limit)}) AS ids,
                          (SELECT count(*) FROM (SELECT 1 FROM "${schema}".outbox_dead_letters WHERE ${all} LIMIT ${p(MATCHING_CAP + 1)}) AS m)::int AS count`;
      hit = pool.query<{ ids: string[]; count: number }>(sql, params).then(({ rows }) => ({ ids: rows[0]!.ids.map(Number), count: rows[0]!.count }));
      cache.set(id, hit);
    }
    return hit;
  };
}

/**
 * Start the console over `t`, log in, walk to the deep pages, then time each page
 * `warmUps + repeats` times. Answers that are wrong go to `check`.
 */
export async function timeConsolePages(pool: pg.Pool, t: ConsoleTables, o: ConsolePagesOptions, check: Check): Promise<ConsolePagesResult> {
  const password = `bench-${Math.random().toString(36).slice(2)}-${Date.now()}`;
  const console_ = await startConsole({ outboxes: [{ name: OUTBOX, databaseUrl: DATABASE_URL, schema: t.schema }], users: [{ name: USER, role: 'operator', password }], port: 0 });
  try {
    const browser = new ConsoleBrowser(console_.url);
    await browser.login(USER, password);
    const result: ConsolePagesResult = { pages: {}, walks: {} };
    const pages = await consolePages(pool, t, browser, o, check, result);
    const calls = o.warmUps + o.repeats;
    for (const page of pages) {
      const ms: number[] = [];
      const bytes: number[] = [];
      let example = '';
      for (let i = 0; i < calls; i++) {
        const url = await page.url(i);
        const answer = await browser.get(url);
        await page.check(answer, i);
        if (i < o.warmUps) continue;
        ms.push(answer.ms);
        bytes.push(answer.body.length);
        if (!example) example = url.replace(/^https?:\/\/[^/]+/, '');
      }
      result.pages[page.what] = { ...percentiles(ms.sort((a, b) => a - b)), calls: ms.length, example, bytes: bytes.sort((a, b) => a - b)[bytes.length >> 1] ?? 0 };
    }
    // Every page timed, each as often as asked (a name given twice would hide one).
    check(Object.keys(result.pages).length === pages.length, `pages: ${Object.keys(result.pages).length} timed of ${pages.length}`);
    for (const [what, p] of Object.entries(result.pages)) check(p.calls === o.repeats && Number.isFinite(p.p95), `page "${what}": ${p.calls} timed requests of ${o.repeats}`);
    log(`console pages: ${Object.keys(result.pages).length} pages timed over HTTP`);
    return result;
  } finally {
    await console_.close();
  }
}

async function consolePages(pool: pg.Pool, t: ConsoleTables, browser: ConsoleBrowser, o: ConsolePagesOptions, check: Check, result: ConsolePagesResult): Promise<Page[]> {
  const ref = reference(pool, t.schema);
  const calls = o.warmUps + o.repeats;
  const { first, last } = t.deadLetterIds;
  const span = last - first;
  const topic = (i: number): string => CONSOLE_TOPICS[i % CONSOLE_TOPICS.length]!;
  const name = (i: number): string => CONSOLE_ERROR_NAMES[i % CONSOLE_ERROR_NAMES.length]![0];
  const key = (i: number): string => `key-${(i * 7919) % 50_000}`;
  const hour = 3_600_000;
  const to = t.deadLetteredTo.getTime();
  const sevenDays: Filter = { since: new Date(to - 14 * 24 * hour), until: new Date(to - 7 * 24 * hour) };

  /** Every page: 200, HTML, the session's, the heading expected. */
  const basics = (page: TimedPage, title: string): boolean => {
    const ok = page.status === 200 && page.contentType.startsWith('text/html') && signedInAs(page.body, USER) && heading(page.body) === title;
    check(ok, `${page.url}: status ${page.status}, heading ${JSON.stringify(heading(page.body))}, expected 200 and "${title}"`);
    return ok;
  };
  /** A list page of `f` after `after`: exactly the dead letters expected, and the count line. */
  const listCheck = async (page: TimedPage, f: Filter, after: number | null, nonEmpty: boolean): Promise<void> => {
    if (!basics(page, 'Dead letters')) return;
    const want = await ref(f, after, DEAD_LETTER_PAGE_SIZE);
    const ids = deadLetterIds(page.body);
    check(JSON.stringify(ids) === JSON.stringify(want.ids), `${page.url}: shows ${ids.length} dead letters (${ids.slice(0, 3).join(', ')}…), expected ${want.ids.length} (${want.ids.slice(0, 3).join(', ')}…)`);
    check(!nonEmpty || ids.length > 0, `${page.url}: shows no dead letter`);
    check(statusCount(page.body) === shown(want.count, MATCHING_CAP), `${page.url}: count line says ${String(statusCount(page.body))}, expected ${shown(want.count, MATCHING_CAP)}`);
  };
  const filterPage = (what: string, f: (i: number) => Filter): Page => ({
    what,
    url: (i) => `${LIST}${query(f(i))}`,
    check: (page, i) => listCheck(page, f(i), null, true),
  });
  /** A page deep in a list: a link the walk collected; its filter kept, its cursor the walk's. */
  const deepPage = (what: string, f: Filter, links: string[]): Page => ({
    what,
    url: (i) => links[i]!,
    check: async (page) => {
      const params = new URL(page.url).searchParams;
      const after = Number(params.get('after'));
      params.delete('after');
      check(`?${params.toString()}` === query(f) || (params.size === 0 && query(f) === ''), `${page.url}: the Next page link lost its filter`);
      await listCheck(page, f, after, true);
    },
  });

  // The walks to the deep pages.
  const { rows: window } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${t.schema}".outbox_dead_letters WHERE dead_lettered_at >= $1 AND dead_lettered_at < $2`,
    [sevenDays.since, sevenDays.until],
  );
  const everything = await walk(browser, LIST, t.sizes.deadLetters, o, calls, check, result, 'no filter');
  const deepSevenDays = await walk(browser, `${LIST}${query(sevenDays)}`, window[0]!.n, o, calls, check, result, '7 days');

  // Links a page offers: the replay of a topic's dead letters (from the topic's list page), page 2 of the parked keys.
  const links = new Map<string, string | null>();
  const linkOn = async (url: string, find: (body: string) => string | null): Promise<string> => {
    if (!links.has(url)) {
      const page = await browser.get(url);
      links.set(url, page.status === 200 ? find(page.body) : null);
    }
    const link = links.get(url);
    check(link !== null && link !== undefined, `${url}: the link the bench follows is not on the page`);
    return link ?? url;
  };
  const replayLink = (i: number): Promise<string> => linkOn(`${LIST}${query({ topic: topic(i) })}`, (body) => linkStartingWith(body, 'Replay all '));
  const parkedNext = (): Promise<string> => linkOn(`${BASE}parked-keys`, nextLink);
  const parkedPage = async (page: TimedPage, offset: number): Promise<void> => {
    if (!basics(page, 'Parked keys')) return;
    const { rows } = await pool.query<{ topic: string; key: string }>(
      `SELECT topic, key FROM "${t.schema}".outbox_parked_keys ORDER BY parked_at, topic, key LIMIT $1 OFFSET $2`,
      [PARKED_KEY_PAGE_SIZE, offset],
    );
    const shownKeys = parkedKeyRows(page.body);
    check(rows.length > 0 && JSON.stringify(shownKeys) === JSON.stringify(rows.map((r) => ({ topic: r.topic, key: r.key }))), `${page.url}: shows ${shownKeys.length} parked keys, expected ${rows.length} (parked longest first)`);
  };
  const selected = (i: number): number[] => {
    const start = first + ((i * 104_729) % Math.max(1, span - DEAD_LETTER_PAGE_SIZE));
    return Array.from({ length: 10 }, (_, k) => start + 5 * k);
  };

  return [
    {
      what: 'overview',
      url: () => BASE,
      check: async (page) => {
        if (!basics(page, `Outbox ${OUTBOX}`)) return;
        const unsent = t.sizes.unsentRows + t.sizes.parkedKeys * t.sizes.waitingPerKey;
        const capped = (n: number, cap: number): RegExp => (n > cap ? /^about [\d,]+$/ : new RegExp(`^${n.toLocaleString('en-US')}$`));
        check(capped(unsent, BACKLOG_CAP).test(card(page.body, 'Backlog (unsent rows)') ?? ''), `overview: backlog ${String(card(page.body, 'Backlog (unsent rows)'))}`);
        check(capped(t.sizes.deadLetters, DEAD_LETTER_CAP).test(card(page.body, 'Dead letters') ?? ''), `overview: dead letters ${String(card(page.body, 'Dead letters'))}`);
        check(card(page.body, 'Parked keys') === t.sizes.parkedKeys.toLocaleString('en-US'), `overview: parked keys ${String(card(page.body, 'Parked keys'))}`);
        // Live or not by now (the build wrote its heartbeat minutes ago): one relay.
        check(/^[01] of 1$/.test(card(page.body, 'Relays live') ?? ''), `overview: relays live ${String(card(page.body, 'Relays live'))}`);
        const topics = tableRows(page.body).filter((r) => /dead-letters\?topic=/.test(r)).length;
        check(topics === CONSOLE_TOPICS.length, `overview: ${topics} topics in "by topic", expected ${CONSOLE_TOPICS.length}`);
      },
    },
    filterPage('dead letters, first page', () => ({})),
    deepPage('dead letters, a page deep in the list (Next page links followed to it)', {}, everything),
    filterPage('dead letters of a topic', (i) => ({ topic: topic(i) })),
    filterPage('dead letters of a key', (i) => ({ key: key(i) })),
    filterPage('dead letters of an error name (1% to 60% of them)', (i) => ({ errorName: name(i) })),
    filterPage('dead letters whose reason contains "bytes" (85%)', () => ({ reason: 'bytes' })),
    filterPage('dead letters whose reason contains \'"h13"\' (0.01%)', () => ({ reason: '"h13"' })),
    filterPage('dead letters of the last hour of them', () => ({ since: new Date(to - hour), until: new Date(to + 1) })),
    filterPage('dead letters of one hour 20 days back', (i) => {
      const from = to - (20 * 24 + (i % 24)) * hour;
      return { since: new Date(from), until: new Date(from + hour) };
    }),
    deepPage('dead letters of 7 days, a page deep in them (Next page links followed to it)', sevenDays, deepSevenDays),
    filterPage('dead letters of a topic and an error name, last 3 days', (i) => ({ topic: topic(i), errorName: name(i % 3), since: new Date(to - 72 * hour) })),
    {
      what: 'one dead letter',
      url: (i) => `${LIST}/${first + ((i * 104_729) % (span + 1))}`,
      check: async (page, i) => {
        const id = first + ((i * 104_729) % (span + 1));
        if (!basics(page, `Dead letter ${id}`)) return;
        const { rows } = await pool.query<{ topic: string; key: string; error_name: string }>(`SELECT topic, key, error_name FROM "${t.schema}".outbox_dead_letters WHERE id = $1`, [id]);
        const r = rows[0];
        check(r !== undefined && field(page.body, 'Topic') === r.topic && field(page.body, 'Key') === r.key && field(page.body, 'Error name') === r.error_name, `${page.url}: topic, key or error name not those of dead letter ${id}`);
      },
    },
    {
      what: 'replay confirmation of a topic (dry-run count, first 20 shown)',
      url: replayLink,
      check: async (page, i) => {
        if (!basics(page, 'Replay dead letters')) return;
        const want = await ref({ topic: topic(i) }, null, PREVIEW_ROWS);
        check(statusCount(page.body) === shown(want.count, ACTION_CAP), `${page.url}: dry run says ${String(statusCount(page.body))}, expected ${shown(want.count, ACTION_CAP)}`);
        check(JSON.stringify(deadLetterIds(page.body)) === JSON.stringify(want.ids) && want.ids.length > 0, `${page.url}: the first rows shown are not the topic's first ${PREVIEW_ROWS}`);
        check(page.body.includes('<button type="submit">Replay '), `${page.url}: no replay button`);
      },
    },
    {
      what: 'discard confirmation of 10 selected',
      url: (i) => `${LIST}/discard?${new URLSearchParams([['scope', 'ids'], ...selected(i).map((id): [string, string] => ['id', String(id)])]).toString()}`,
      check: async (page, i) => {
        if (!basics(page, 'Discard dead letters')) return;
        check(statusCount(page.body) === '10', `${page.url}: dry run says ${String(statusCount(page.body))}, expected 10`);
        check(JSON.stringify(deadLetterIds(page.body)) === JSON.stringify(selected(i)), `${page.url}: the rows shown are not the ones selected`);
        check(page.body.includes('Discard 10 dead letters</button>'), `${page.url}: no discard button`);
      },
    },
    { what: 'parked keys, first page', url: () => `${BASE}parked-keys`, check: (page) => parkedPage(page, 0) },
    { what: 'parked keys, second page (its Next page link)', url: parkedNext, check: (page) => parkedPage(page, PARKED_KEY_PAGE_SIZE) },
  ];
}

/**
 * Follow "Next page" from `start` through the first `deepTo` of `rows` matching rows,
 * collecting `count` links spread over those between `deepFrom` and `deepTo`. Checks that
 * every step answers 200 and that the pages run on without a gap or a repeat: the bench's
 * dead letters have consecutive ids in time order, so a list or a time range is a run of
 * consecutive ids.
 */
async function walk(browser: ConsoleBrowser, start: string, rows: number, o: ConsolePagesOptions, count: number, check: Check, result: ConsolePagesResult, what: string): Promise<string[]> {
  const from = Math.floor(rows * o.deepFrom);
  const to = Math.floor(rows * o.deepTo);
  const every = Math.max(1, Math.floor((to - from) / DEAD_LETTER_PAGE_SIZE / count));
  const links: string[] = [];
  const ms: number[] = [];
  let url: string | null = start;
  let seen = 0;
  let lastId: number | null = null;
  let steps = 0;
  log(`console pages: walking ${what} along "Next page" to ${to.toLocaleString('en-US')} rows`);
  while (url !== null && links.length < count) {
    const page = await browser.get(url);
    ms.push(page.ms);
    const ids = deadLetterIds(page.body);
    if (page.status !== 200 || ids.length === 0 || (lastId !== null && ids[0] !== lastId + 1) || ids.some((id, j) => j > 0 && id !== ids[j - 1]! + 1)) {
      check(false, `walk ${what}: ${url} answered ${page.status} with ids ${ids.slice(0, 3).join(', ')}… after id ${String(lastId)}`);
      break;
    }
    seen += ids.length;
    lastId = ids[ids.length - 1]!;
    url = nextLink(page.body);
    if (url !== null && Number(new URL(url, browser.base).searchParams.get('after')) !== lastId) check(false, `walk ${what}: the Next page link does not start after the last id shown`);
    if (url !== null && seen >= from && steps++ % every === 0) links.push(url);
  }
  check(links.length === count, `walk ${what}: ${links.length} deep pages reached of ${count} (${seen} rows walked)`);
  const p = percentiles(ms.sort((a, b) => a - b));
  result.walks[what] = { pages: ms.length, msP50: p.p50, msP95: p.p95 };
  while (links.length < count) links.push(start); // checked as wrong above; keeps the timing loop whole
  return links;
}
