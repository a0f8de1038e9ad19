import type pg from 'pg';

/** Writer loops that keep enqueueing until stopped, timing every transaction. */
export interface RunningWriters {
  /** Message ids of committed rows. */
  readonly committed: Set<string>;
  /** The longest writer transaction so far, BEGIN to COMMIT, in ms. */
  readonly longestTransactionMs: number;
  /** Rows committed so far. */
  readonly rows: number;
  /** The first error a writer stopped on, if any (a writer stops at its first error). */
  readonly error: unknown;
  /** Stop after the transactions in progress; rejects with the first writer error. */
  stop(): Promise<void>;
}

/**
 * `writers` loops, each enqueueing 1-3 rows per transaction over `keys` keys shared by
 * all (so one key's transactions commit out of id order), until stop().
 */
export function startWriters(pool: pg.Pool, schema: string, topic: string, writers: number, keys: number): RunningWriters {
  const committed = new Set<string>();
  let longest = 0;
  let stopping = false;
  let firstError: unknown;
  const loops = Array.from({ length: writers }, async (_, w) => {
    const client = await pool.connect();
    try {
      for (let t = 0; !stopping; t++) {
        const started = performance.now();
        await client.query('BEGIN');
        const { rows } = await client.query<{ message_id: string }>(
          `INSERT INTO "${schema}".outbox (topic, key, payload)
           SELECT $1, 'key-' || ((($2::int * 7 + $3::int * 13 + i) % $4::int)), jsonb_build_object('writer', $2::int, 'tx', $3::int, 'i', i)
             FROM generate_series(1, $5::int) AS i
           RETURNING message_id`,
          [topic, w, t, keys, 1 + ((t + w) % 3)],
        );
        await client.query('COMMIT');
        longest = Math.max(longest, performance.now() - started);
        for (const r of rows) committed.add(r.message_id);
      }
    } catch (error) {
      firstError ??= error;
      await client.query('ROLLBACK').catch(() => undefined);
    } finally {
      client.release();
    }
  });
  return {
    committed,
    get longestTransactionMs() {
      return longest;
    },
    get rows() {
      return committed.size;
    },
    get error() {
      return firstError;
    },
    async stop() {
      stopping = true;
      await Promise.all(loops);
      if (firstError) throw firstError;
    },
  };
}
