/**
 * The big tables the console must stay fast on (issue 22), built in a private schema with
 * INSERT ... SELECT generate_series (no COPY, no client round trip per row):
 *
 * - `outboxRows` outbox rows, all sent but the newest `unsentRows` (a backlog) and the
 *   rows waiting behind `parkedKeys` parked keys (`waitingPerKey` each, old ids, among the
 *   sent ones, as a parked key's rows are);
 * - `deadLetters` dead letters over 8 topics, 5 error names (skewed, as failures are),
 *   reasons that name the message's size (so nearly every reason is distinct, as the
 *   relay's are), 50,000 keys, spread over 30 days in id order, 5% of them policy park;
 * - the relays' per-minute counts of the last two hours, one live relay holding every
 *   shard.
 *
 * Then VACUUM ANALYZE, as autovacuum would have done on tables this old. The result says
 * what it built and checks it: {@link buildConsoleTables} fails when the tables do not
 * hold what it says. Exported for the console's web bench, which times the pages on the
 * same tables.
 */
import type pg from 'pg';
import { benchSchema } from './common.js';
import { log } from './util.js';

export interface ConsoleTableSizes {
  outboxRows: number;
  unsentRows: number;
  parkedKeys: number;
  waitingPerKey: number;
  deadLetters: number;
}

export const CONSOLE_TOPICS = ['orders', 'payments', 'shipments', 'invoices', 'customers', 'stock', 'returns', 'audit'];
/** Error names and how many dead letters of every 100 have each. */
export const CONSOLE_ERROR_NAMES: Array<[string, number]> = [
  ['MESSAGE_TOO_LARGE', 60],
  ['validation:too_large', 25],
  ['INVALID_RECORD', 10],
  ['validation:empty_key', 4],
  ['validation:invalid_headers', 1],
];
export const CONSOLE_KEYS = 50_000;
const DAYS = 30;

export interface ConsoleTables {
  schema: string;
  sizes: ConsoleTableSizes;
  buildSeconds: number;
  /** On-disk size of each table with its indexes, in bytes. */
  bytes: { outbox: number; deadLetters: number; parkedKeys: number };
  /** First and last dead-letter id and time (ids ascend with time). */
  deadLetterIds: { first: number; last: number };
  deadLetteredFrom: Date;
  deadLetteredTo: Date;
  drop(): Promise<void>;
}

/** Build the tables; see the file's comment. Takes minutes at 10,000,000 outbox rows. */
export async function buildConsoleTables(pool: pg.Pool, sizes: ConsoleTableSizes): Promise<ConsoleTables> {
  const { schema, drop } = await benchSchema(pool, 'bench_console');
  const s = `"${schema}"`;
  const started = performance.now();
  try {
    const client = await pool.connect();
    try {
      await client.query('SET synchronous_commit = off');
      await client.query("SET maintenance_work_mem = '256MB'");
      // The outbox: ids 1..N; the newest unsentRows unsent; created_at one row every 10 ms
      // up to now. Chunks of a million keep each transaction (and its WAL) bounded.
      const n = sizes.outboxRows;
      const step = 1_000_000;
      for (let from = 1; from <= n; from += step) {
        const to = Math.min(n, from + step - 1);
        await client.query(
          `INSERT INTO ${s}.outbox (id, message_id, topic, key, payload, created_at, sent_at, attempts)
           SELECT i, md5(i::text)::uuid, ($3::text[])[1 + (i % $4) % 8], 'key-' || (i % $4),
                  jsonb_build_object('i', i, 'type', 'order_updated'),
                  now() - make_interval(secs => ($5 - i) / 100.0),
                  CASE WHEN i <= $5 - $6 THEN now() - make_interval(secs => ($5 - i) / 100.0) END, 1
             FROM generate_series($1::bigint, $2::bigint) AS i`,
          [from, to, CONSOLE_TOPICS, CONSOLE_KEYS, n, sizes.unsentRows],
        );
        log(`console tables: outbox rows ${to.toLocaleString('en-US')} of ${n.toLocaleString('en-US')}`);
      }
      await client.query(`SELECT setval('${s}.outbox_id_seq', $1)`, [n]);

      // Dead letters: ids above the outbox's, one every DAYS/deadLetters, up to an hour ago.
      const d = sizes.deadLetters;
      const names = CONSOLE_ERROR_NAMES.flatMap(([name, share]) => Array<string>(share).fill(name));
      for (let from = 1; from <= d; from += step) {
        const to = Math.min(d, from + step - 1);
        await client.query(
          `INSERT INTO ${s}.outbox_dead_letters
             (id, message_id, topic, key, payload, created_at, attempts, reason, error_name, policy, first_failed_at, dead_lettered_at)
           SELECT $3 + j, md5('dl' || j)::uuid, ($4::text[])[1 + ((j * 31) % $5) % 8], 'key-' || ((j * 31) % $5),
                  jsonb_build_object('j', j, 'type', 'order_updated', 'pad', repeat('x', 100)),
                  at, 1 + j % 3,
                  CASE ($6::text[])[1 + j % 100]
                    WHEN 'MESSAGE_TOO_LARGE' THEN 'Kafka refused the record: MESSAGE_TOO_LARGE (the message is ' || (1048576 + j % 50000) || ' bytes)'
                    WHEN 'validation:too_large' THEN 'the message is ' || (1048576 + j % 70000) || ' bytes, over the relay''s limit of 1048576 (--max-message-bytes)'
                    WHEN 'INVALID_RECORD' THEN 'Kafka refused the record: INVALID_RECORD (broker-side validation of the record failed)'
                    WHEN 'validation:empty_key' THEN 'the key is empty: every event needs its entity key (it decides partition and order)'
                    ELSE 'header "h' || (j % 97) || '" is not a string'
                  END,
                  ($6::text[])[1 + j % 100],
                  CASE WHEN j % 20 = 0 THEN 'park' ELSE 'skip' END,
                  at, at
             FROM generate_series($1::bigint, $2::bigint) AS j,
                  LATERAL (SELECT now() - interval '1 hour' - make_interval(secs => ($7 - j) * ($8 * 86400.0 / $7)) AS at) AS t`,
          [from, to, n, CONSOLE_TOPICS, CONSOLE_KEYS, names, d, DAYS],
        );
        log(`console tables: dead letters ${to.toLocaleString('en-US')} of ${d.toLocaleString('en-US')}`);
      }

      // Parked keys: each behind its key's first park dead letter, with its oldest
      // waitingPerKey outbox rows unsent (a key's rows are ids key + 50,000 m: one topic each).
      await client.query(
        `INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id, parked_at)
         SELECT topic, key, id, date_trunc('milliseconds', dead_lettered_at)
           FROM (SELECT DISTINCT ON (topic, key) topic, key, id, dead_lettered_at
                   FROM ${s}.outbox_dead_letters
                  WHERE policy = 'park' AND id <= $2 + 200 * $1
                  ORDER BY topic, key, id) AS first
          ORDER BY id
          LIMIT $1`,
        [sizes.parkedKeys, n],
      );
      await client.query(
        `UPDATE ${s}.outbox
            SET sent_at = NULL
          WHERE id IN (SELECT substr(p.key, 5)::bigint + $2 * m
                         FROM ${s}.outbox_parked_keys AS p, generate_series(1, $1) AS m)`,
        [sizes.waitingPerKey, CONSOLE_KEYS],
      );

      // The relays' last two hours, and the relay itself.
      await client.query(
        `INSERT INTO ${s}.outbox_relays (relay_id, application_name, lease_ttl_ms) VALUES ('bench-relay', 'bench', 600000)`,
      );
      await client.query(`UPDATE ${s}.outbox_shard_leases SET owner = 'bench-relay'`);
      await client.query(
        `INSERT INTO ${s}.outbox_relay_minutes (minute, relay_id, sent, dead_lettered, last_id)
         SELECT date_trunc('minute', now()) - make_interval(mins => m), 'bench-relay', 6000, m % 3, $1 - m * 6000
           FROM generate_series(1, 120) AS m`,
        [n],
      );
      log('console tables: VACUUM ANALYZE');
      await client.query(`VACUUM ANALYZE ${s}.outbox, ${s}.outbox_dead_letters, ${s}.outbox_parked_keys, ${s}.outbox_relay_minutes`);
    } finally {
      client.release();
    }
    const buildSeconds = (performance.now() - started) / 1000;

    // The tables hold what this says, or the timings mean nothing.
    const { rows } = await pool.query<Record<string, number | Date>>(
      `SELECT (SELECT count(*) FROM ${s}.outbox)::bigint AS outbox,
              (SELECT count(*) FROM ${s}.outbox WHERE sent_at IS NULL)::bigint AS unsent,
              (SELECT count(*) FROM ${s}.outbox_dead_letters)::bigint AS dead,
              (SELECT count(DISTINCT topic) FROM ${s}.outbox_dead_letters)::bigint AS topics,
              (SELECT count(DISTINCT error_name) FROM ${s}.outbox_dead_letters)::bigint AS names,
              (SELECT count(*) FROM ${s}.outbox_parked_keys)::bigint AS parked,
              (SELECT min(id) FROM ${s}.outbox_dead_letters) AS first_id,
              (SELECT max(id) FROM ${s}.outbox_dead_letters) AS last_id,
              (SELECT min(dead_lettered_at) FROM ${s}.outbox_dead_letters) AS from_at,
              (SELECT max(dead_lettered_at) FROM ${s}.outbox_dead_letters) AS to_at,
              pg_total_relation_size('${s}.outbox') AS outbox_bytes,
              pg_total_relation_size('${s}.outbox_dead_letters') AS dead_bytes,
              pg_total_relation_size('${s}.outbox_parked_keys') AS parked_bytes`,
    );
    const r = rows[0]!;
    const want = {
      outbox: sizes.outboxRows,
      unsent: sizes.unsentRows + sizes.parkedKeys * sizes.waitingPerKey,
      dead: sizes.deadLetters,
      topics: CONSOLE_TOPICS.length,
      names: CONSOLE_ERROR_NAMES.length,
      parked: sizes.parkedKeys,
    };
    const wrong = Object.entries(want).filter(([k, v]) => Number(r[k]) !== v);
    if (wrong.length > 0) throw new Error(`console tables: ${wrong.map(([k, v]) => `${k} ${String(r[k])}, expected ${v}`).join('; ')}`);
    log(`console tables built in ${buildSeconds.toFixed(0)} s`);
    return {
      schema,
      sizes,
      buildSeconds,
      bytes: { outbox: Number(r.outbox_bytes), deadLetters: Number(r.dead_bytes), parkedKeys: Number(r.parked_bytes) },
      deadLetterIds: { first: Number(r.first_id), last: Number(r.last_id) },
      deadLetteredFrom: r.from_at as Date,
      deadLetteredTo: r.to_at as Date,
      drop,
    };
  } catch (error) {
    await drop().catch(() => undefined);
    throw error;
  }
}
