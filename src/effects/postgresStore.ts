/**
 * The effect store on Postgres: the table effect_keys of migration 009 (`outbox-relay
 * migrate` creates it), one row per key, each operation one autocommit statement on a
 * pool (src/effects/sql/effectKeys.ts), on the database's clock.
 *
 * Never on a connection inside a transaction of its own: in a consumer's handler the
 * guard's reservation and confirmation must not roll back with the handler's transaction
 * (the effect outside Postgres would have happened, and its record be gone), and a
 * duplicate in another transaction would wait on the row's lock until that transaction
 * ends. So the store takes a pool and refuses a client.
 */
import type pg from 'pg';
import { ConfigError, SchemaError } from '../shared/errors.js';
import { quoteSchema } from '../shared/identifiers.js';
import type { ConfirmOutcome, EffectRecord, EffectStore, ReserveOutcome } from './store.js';
import { confirmAnySql, confirmOwnedSql, forgetSql, inspectSql, purgeExpiredSql, releaseSql, renewSql, reserveSql } from './sql/effectKeys.js';

/** Options of {@link postgresEffectStore}. */
export interface PostgresEffectStoreOptions {
  /** Schema where `outbox-relay migrate` created effect_keys. Default `public`. */
  schema?: string;
  /**
   * How long the guard waits for any one statement, a free connection of the pool
   * included (ms). Past it the operation counts as failed. Default 5000.
   */
  timeoutMs?: number;
}

/** An {@link EffectStore} on Postgres, with the purge of forgotten rows. */
export interface PostgresEffectStore extends EffectStore {
  /**
   * Deletes rows past their TTL in batches of `batchSize` (default 1000), oldest first,
   * until none is left; resolves with how many. Live reservations and confirmations are
   * never touched. Run it from cron (the rows are dead already: the guard treats them as
   * absent; this only keeps the table small).
   */
  purgeExpired(options?: { batchSize?: number }): Promise<number>;
}

/** The statement did not settle within `timeoutMs`; it may still complete later, harmlessly. */
class StatementTimeout extends Error {
  constructor(timeoutMs: number) {
    super(`no reply within ${timeoutMs} ms (postgresEffectStore.timeoutMs): the pool had no free connection, or Postgres did not answer`);
    this.name = 'StatementTimeout';
  }
}

/**
 * An {@link EffectStore} on a `pg.Pool`. Give it a pool with connections to spare for
 * the guard (in a consumer, not the consumer's own pool at its `batchesInFlight`: every
 * in-flight batch holds one of its connections while its handler waits on the guard).
 * @throws ConfigError for a bad option, or a client (`pool.connect()`'s, or a `pg.Client`) instead of a pool
 */
export function postgresEffectStore(pool: pg.Pool, options: PostgresEffectStoreOptions = {}): PostgresEffectStore {
  const p = pool as unknown as Record<string, unknown> | null;
  if (typeof p !== 'object' || p === null || typeof p.query !== 'function' || typeof p.connect !== 'function') {
    throw new ConfigError('postgresEffectStore.pool', 'must be a pg.Pool');
  }
  if (typeof p.release === 'function' || typeof p.totalCount !== 'number') {
    throw new ConfigError(
      'postgresEffectStore.pool',
      "must be a pg.Pool, not a client: the guard's records must not be written in a transaction of yours (a consumer handler's ctx.client), or a rollback would erase the record of an effect that already happened",
    );
  }
  if (typeof options !== 'object' || options === null) throw new ConfigError('postgresEffectStore.options', 'must be an object');
  for (const k of Object.keys(options)) if (k !== 'schema' && k !== 'timeoutMs') throw new ConfigError(`postgresEffectStore.${k}`, 'is not an option (they are schema, timeoutMs)');
  const table = `${quoteSchema(options.schema)}.effect_keys`;
  const timeoutMs = options.timeoutMs ?? 5_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 600_000) throw new ConfigError('postgresEffectStore.timeoutMs', `must be a whole number of milliseconds from 1 to 600000, got ${String(timeoutMs)}`);
  const sql = { reserve: reserveSql(table), renew: renewSql(table), confirmOwned: confirmOwnedSql(table), confirmAny: confirmAnySql(table), release: releaseSql(table), inspect: inspectSql(table), forget: forgetSql(table), purge: purgeExpiredSql(table) };

  // Bounded like the Redis store's commands: a late statement still completes on its
  // connection, and whatever it does is what a crashed attempt would have left (a
  // reservation that expires) or what this one meant to do.
  const query = async <R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>> => {
    let timer: NodeJS.Timeout | undefined;
    const sent = pool.query<R>(text, values);
    sent.catch(() => undefined);
    try {
      return await Promise.race([sent, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new StatementTimeout(timeoutMs)), timeoutMs)))]);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === '42P01' || code === '3F000') throw new SchemaError(`${table} does not exist: run \`outbox-relay migrate\` (migration 009 creates it)`, { table });
      throw error;
    } finally {
      clearTimeout(timer);
    }
  };

  return {
    kind: 'postgres',
    async reserve(key, token, o): Promise<ReserveOutcome> {
      const { rows } = await query<{ attempts: number | null; live: boolean | null; confirmed: boolean | null; remaining_ms: number | null }>(sql.reserve, [key, token, o.reservationMs, o.ttlMs, o.takeOver]);
      const r = rows[0];
      if (r?.attempts != null) return r.attempts > 1 ? { state: 'taken_over', expiredForMs: Math.max(0, -(r.remaining_ms ?? 0)) } : { state: 'reserved' };
      // Nothing taken: what holds the key, as the snapshot saw it (see reserveSql).
      if (!r?.live) return { state: 'busy', remainingMs: 0 };
      if (r.confirmed) return { state: 'done' };
      const remaining = r.remaining_ms ?? 0;
      if (remaining > 0) return { state: 'busy', remainingMs: remaining };
      return o.takeOver ? { state: 'busy', remainingMs: 0 } : { state: 'in_doubt', expiredForMs: -remaining };
    },
    async renew(key, token, o) {
      return (await query(sql.renew, [key, token, o.reservationMs, o.ttlMs])).rowCount === 1;
    },
    async confirm(key, token, o): Promise<ConfirmOutcome> {
      if ((await query(sql.confirmOwned, [key, token, o.ttlMs])).rowCount === 1) return 'held';
      return (await query(sql.confirmAny, [key, o.ttlMs])).rowCount === 1 ? 'unheld' : 'done';
    },
    async release(key, token) {
      return (await query(sql.release, [key, token])).rowCount === 1;
    },
    async inspect(key): Promise<EffectRecord | undefined> {
      const { rows } = await query<{ confirmed_at: Date | null; reserved_for_ms: number | null; expires_in_ms: number }>(sql.inspect, [key]);
      const r = rows[0];
      if (!r) return undefined;
      if (r.confirmed_at) return { state: 'done', confirmedAt: r.confirmed_at, expiresInMs: r.expires_in_ms };
      return { state: 'reserved', reservedForMs: r.reserved_for_ms ?? 0, expiresInMs: r.expires_in_ms };
    },
    async forget(key) {
      const { rows } = await query<{ live: boolean }>(sql.forget, [key]);
      return rows.some((r) => r.live);
    },
    async purgeExpired(o) {
      const batchSize = o?.batchSize ?? 1_000;
      if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100_000) throw new ConfigError('purgeExpired.batchSize', `must be a whole number from 1 to 100000, got ${String(batchSize)}`);
      let total = 0;
      for (;;) {
        const n = (await query(sql.purge, [batchSize])).rowCount ?? 0;
        total += n;
        if (n < batchSize) return total;
      }
    },
  };
}
