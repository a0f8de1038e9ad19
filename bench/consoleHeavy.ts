/**
 * The console's list pages over heavy rows (issue 33): `deadLetters` dead letters (200,000
 * in both profiles), some of them with payloads of about 1 MB (hex text, which Postgres
 * cannot compress much), several among the first page's rows and the rest spread over the
 * table. Every list page (the dead letters unfiltered, deep, by topic, by reason, by
 * time; a discard's confirmation with its preview; the parked keys) is timed over HTTP
 * from the real console, request to last byte, with its size: p95 under 500 ms and every
 * page under 200 KB, which holds only if lists leave payloads in the table.
 *
 * A page's time over HTTP on a shared machine is mostly waiting for a core: so that a run
 * under load still says what a page costs, each page also records the CPU its timed calls
 * used (the bench process, which holds the console and the client, plus the console's
 * Postgres backends; /proc counts the latter in 10 ms ticks), and the data-layer reads
 * behind it are timed alone, as the console calls them.
 *
 * It checks its own profile ran: the table holds `deadLetters` rows, at least `heavyRows`
 * of them over 1,000,000 bytes of payload, the first page shows some of them, every page
 * answers 200 with its rows, and every page was timed.
 */
import type pg from 'pg';
import { startConsole } from '../src/console/console.js';
import { matchingIds, searchDeadLetters } from '../src/console/data/deadLetters.js';
import { listParkedKeys } from '../src/console/data/parkedKeys.js';
import { load1 } from './machine.js';
import { cpuTicks, TICKS_PER_SECOND } from './procCpu.js';
import { benchSchema, DATABASE_URL } from './common.js';
import { ConsoleBrowser, deadLetterIds } from './consoleHttp.js';
import { log, percentiles, type Percentiles } from './util.js';

export interface HeavyOptions {
  deadLetters: number;
  /** Rows with a 1 MB payload (at least 10: those of the first page). */
  heavyRows: number;
  repeats: number;
}

export interface HeavyPage extends Percentiles {
  calls: number;
  example: string;
  /** Largest size of the page seen, bytes. */
  maxBytes: number;
  /** CPU per timed call, ms: the bench process (console and client) and the console's Postgres backends. */
  cpuMs: { process: number; postgres: number };
  /** The data-layer reads behind the page, timed alone (ms per page's worth). */
  read: Percentiles;
  /** 1-minute load average when the page's timing started and ended. */
  load1: [number, number];
}

export interface HeavyResult {
  deadLetters: number;
  heavyRows: number;
  /** Ids of the 1 MB rows on the first page. */
  heavyOnFirstPage: number;
  buildSeconds: number;
  pages: Record<string, HeavyPage>;
}

const TOPICS = ['orders', 'payments', 'shipments', 'invoices'];
const MB_CHUNKS = 32_768; // md5 hex: 32 characters each, 1,048,576 in all

/**
 * Fill `schema`'s (migrated, empty) dead letters as the bench measures them: `deadLetters`
 * rows, `heavyRows` of them with a 1 MB payload (ten on the first page), their keys
 * parked, analyzed. Returns the heavy rows' ids.
 */
export async function seedHeavyDeadLetters(pool: pg.Pool, schema: string, o: Pick<HeavyOptions, 'deadLetters' | 'heavyRows'>): Promise<number[]> {
  const s = `"${schema}"`;
  const n = o.deadLetters;
  // The first page's rows 5, 10, …, 50 are heavy, then one every n / (heavyRows - 10).
  const every = Math.max(1, Math.floor(n / Math.max(1, o.heavyRows - 10)));
  await pool.query(
    `INSERT INTO ${s}.outbox_dead_letters
       (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy, first_failed_at, dead_lettered_at)
     SELECT j, md5('h' || j)::uuid, ($2::text[])[1 + j % 4], 'key-' || (j % 5000),
            jsonb_build_object('j', j, 'pad', repeat('x', 100)),
            now() - make_interval(secs => $1 - j), 1, 'the message is ' || (1048576 + j) || ' bytes, over the relay''s limit',
            CASE WHEN j % 3 = 0 THEN 'MESSAGE_TOO_LARGE' ELSE 'validation:too_large' END,
            CASE WHEN j % 50 = 0 THEN 'park' ELSE 'skip' END, now() - make_interval(secs => $1 - j), now() - make_interval(secs => $1 - j)
       FROM generate_series(1, $1::bigint) AS j`,
    [n, TOPICS],
  );
  await pool.query(`SELECT setval('${s}.outbox_id_seq', $1)`, [n]);
  const heavyIds = [...Array.from({ length: 10 }, (_, i) => 5 * (i + 1)), ...Array.from({ length: o.heavyRows - 10 }, (_, i) => 60 + i * every)].filter((id) => id <= n);
  for (let i = 0; i < heavyIds.length; i += 10) {
    await pool.query(
      `UPDATE ${s}.outbox_dead_letters
          SET payload = jsonb_build_object('j', id, 'blob', (SELECT string_agg(md5(id::text || '-' || g::text), '') FROM generate_series(1, ${MB_CHUNKS}) AS g))
        WHERE id = ANY($1::bigint[])`,
      [heavyIds.slice(i, i + 10)],
    );
    log(`console heavy rows: ${Math.min(i + 10, heavyIds.length)} of ${heavyIds.length} payloads of 1 MB`);
  }
  await pool.query(`INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id) SELECT topic, key, min(id) FROM ${s}.outbox_dead_letters WHERE policy = 'park' GROUP BY topic, key ON CONFLICT DO NOTHING`);
  await pool.query(`VACUUM ANALYZE ${s}.outbox_dead_letters`);
  return heavyIds;
}

export async function timeHeavyPages(pool: pg.Pool, o: HeavyOptions, check: (ok: boolean, what: string) => void): Promise<HeavyResult> {
  const { schema, drop } = await benchSchema(pool, 'bench_console_heavy');
  const s = `"${schema}"`;
  const started = performance.now();
  try {
    const n = o.deadLetters;
    const heavyIds = await seedHeavyDeadLetters(pool, schema, o);
    const buildSeconds = (performance.now() - started) / 1000;
    const counted = (await pool.query<{ rows: number; heavy: number }>(
      `SELECT count(*)::int AS rows, count(*) FILTER (WHERE octet_length(payload::text) > 1000000)::int AS heavy FROM ${s}.outbox_dead_letters`,
    )).rows[0]!;
    check(counted.rows === n, `heavy: ${counted.rows} dead letters, not ${n}`);
    check(counted.heavy >= o.heavyRows, `heavy: ${counted.heavy} payloads over 1 MB, not ${o.heavyRows}`);

    const password = `bench-${Math.random().toString(36).slice(2)}-${Date.now()}`;
    const ops = await startConsole({ outboxes: [{ name: 'heavy', databaseUrl: DATABASE_URL, schema }], users: [{ name: 'operator', role: 'operator', password }], port: 0 });
    try {
      const browser = new ConsoleBrowser(ops.url);
      await browser.login('operator', password);
      const base = '/outboxes/heavy/';
      const mid = Math.floor(n / 2);
      const page50 = (f: Parameters<typeof searchDeadLetters>[2], afterId: number | null = null) => () => searchDeadLetters(pool, schema, f, { afterId, limit: 50 });
      // Each page: what, its URL, the rows it shows, and the reads the console makes for it (src/console/web/readRoutes.ts, actionRoutes.ts).
      const pages: Array<[string, string, number, () => Promise<unknown>]> = [
        ['dead letters, no filter, first page', `${base}dead-letters`, 50, page50({})],
        ['dead letters, no filter, a page deep in the list', `${base}dead-letters?after=${mid}`, 50, page50({}, mid)],
        ['dead letters of a topic, first page', `${base}dead-letters?topic=payments`, 50, page50({ topic: 'payments' })],
        ['dead letters whose reason contains "bytes"', `${base}dead-letters?reason=bytes`, 50, page50({ reason: 'bytes' })],
        ['dead letters of an error name, deep', `${base}dead-letters?errorName=MESSAGE_TOO_LARGE&after=${mid}`, 50, page50({ errorName: 'MESSAGE_TOO_LARGE' }, mid)],
        ['dead letters since 1 day ago', `${base}dead-letters?since=1d`, 50, page50({ since: '1d' })],
        ['discard confirmation of a topic (preview of 20)', `${base}dead-letters/discard?scope=filter&topic=orders`, 20,
          () => Promise.all([matchingIds(pool, schema, { topic: 'orders' }, 10_000), searchDeadLetters(pool, schema, { topic: 'orders' }, { afterId: null, limit: 20 })])],
        ['parked keys, first page', `${base}parked-keys`, 0, () => listParkedKeys(pool, schema, { after: null, limit: 50 })],
      ];
      // The console's backends: their last statement names this run's schema.
      const backendTicks = async (): Promise<number> => {
        const { rows } = await pool.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE application_name = 'outbox-relay:console' AND position($1 in query) > 0`,
          [schema],
        );
        check(rows.length > 0, 'heavy: the console\'s Postgres backends were found');
        return rows.reduce((sum, r) => sum + (cpuTicks(r.pid) ?? 0), 0);
      };
      const result: HeavyResult = { deadLetters: counted.rows, heavyRows: counted.heavy, heavyOnFirstPage: 0, buildSeconds, pages: {} };
      // One round of every page before any is timed: the console is a long-running process,
      // and the first page timed should not pay for compiling the code all pages share
      // (the committed runs of 2026-12-04 missed the target on the first and second pages
      // timed, each time on a different one).
      for (const [what, url] of pages) check((await browser.get(url)).status === 200, `heavy: ${what} answered in the warm-up`);
      for (const [what, url, rows, read] of pages) {
        const ms: number[] = [];
        let maxBytes = 0;
        let cpu0 = process.cpuUsage();
        let ticks0 = 0;
        const loadFrom = load1();
        for (let i = 0; i < 2 + o.repeats; i++) {
          if (i === 2) [cpu0, ticks0] = [process.cpuUsage(), await backendTicks()];
          const page = await browser.get(url);
          check(page.status === 200, `heavy: ${what} answered ${page.status}`);
          if (rows > 0) check(deadLetterIds(page.body).length === rows, `heavy: ${what} shows ${deadLetterIds(page.body).length} rows, not ${rows}`);
          if (i === 0 && url === `${base}dead-letters`) result.heavyOnFirstPage = deadLetterIds(page.body).filter((id) => heavyIds.includes(id)).length;
          if (i < 2) continue; // warm-up
          ms.push(page.ms);
          maxBytes = Math.max(maxBytes, Buffer.byteLength(page.body));
        }
        const cpu = process.cpuUsage(cpu0);
        const cpuMs = { process: (cpu.user + cpu.system) / 1000 / ms.length, postgres: (((await backendTicks()) - ticks0) * 1000) / TICKS_PER_SECOND / ms.length };
        const loadTo = load1();
        const readMs: number[] = [];
        for (let i = 0; i < 1 + o.repeats; i++) {
          const t = performance.now();
          await read();
          if (i > 0) readMs.push(performance.now() - t);
        }
        result.pages[what] = { ...percentiles(ms.sort((a, b) => a - b)), calls: ms.length, example: url, maxBytes, cpuMs, read: percentiles(readMs.sort((a, b) => a - b)), load1: [loadFrom, loadTo] };
      }
      check(result.heavyOnFirstPage >= 10, `heavy: the first page shows ${result.heavyOnFirstPage} of the 1 MB rows, not 10`);
      check(Object.keys(result.pages).length === pages.length && Object.values(result.pages).every((p) => p.calls === o.repeats), 'heavy: every page timed');
      return result;
    } finally {
      await ops.close();
    }
  } finally {
    await drop().catch(() => undefined);
  }
}
