import type pg from 'pg';
import { quoteSchema } from '../../shared/identifiers.js';
import { ranges, shardsByOwner } from '../../commands/status.js';
import { leasesSql, relaysSql } from '../../commands/sql/status.js';
import type { CappedCount, OutboxOverview, RelayView } from '../model.js';
import { backlogCountSql, backlogEstimateSql } from '../../metrics/sql/metrics.js';
import { oldestLockHolder } from '../../relay/lockHolder.js';
import { deadLetterCountSql, deadLetterGroupsSql, oldestPendingSql, parkedKeyCountSql } from '../sql/overview.js';
import { capped } from './capped.js';
import { readFlow } from './flow.js';

/** Unsent rows are counted up to this many; past it, the planner's estimate says about how many (as the metrics sampler does). */
export const BACKLOG_CAP = 10_000;
/** Dead letters are counted up to this many; past it, the planner's estimate says about how many. */
export const DEAD_LETTER_CAP = 10_000;
/** Parked keys are counted up to this many. */
export const PARKED_KEY_CAP = 10_000;
/** The groupings by reason and topic count the newest this many dead letters. */
export const GROUPED_DEAD_LETTERS = 5_000;
/** Groups shown of each grouping. */
const GROUPS = 20;

/**
 * The dashboard of one outbox: backlog, oldest pending age, the last hour's flow, parked
 * keys, relays with their shards and breakers, dead letters by reason and topic. Read-only
 * (the console's viewer role may call it). Its queries run side by side on `pool`, each
 * reading a bounded number of rows: counts stop at a cap (the backlog and the dead letters
 * then with Postgres' estimate), the groupings count the newest dead letters (see
 * {@link GROUPED_DEAD_LETTERS}).
 *
 * @param outbox `name` as the outbox list calls it, `schema` its (unquoted) schema
 */
export async function readOverview(pool: pg.Pool, outbox: { name: string; schema: string }): Promise<OutboxOverview> {
  const s = quoteSchema(outbox.schema);
  const count = async (sql: string, cap: number): Promise<number> => (await pool.query<{ count: number }>(sql, [cap + 1])).rows[0]!.count;
  // Counted exactly along the unsent index up to the cap; past it the planner's estimate
  // (EXPLAIN reads nothing), which follows a growing backlog between ANALYZE runs.
  const backlogCount = async (): Promise<CappedCount> => {
    const c = capped((await pool.query<{ pending: number }>(backlogCountSql(s), [BACKLOG_CAP + 1, 0])).rows[0]!.pending, BACKLOG_CAP);
    if (!c.capped) return c;
    const plan = (await pool.query<{ 'QUERY PLAN': Array<{ Plan: { 'Plan Rows': number } }> }>(backlogEstimateSql(s))).rows[0];
    const estimate = Math.round(plan?.['QUERY PLAN'][0]?.Plan['Plan Rows'] ?? 0);
    return estimate > BACKLOG_CAP ? { ...c, estimate } : c;
  };
  const deadLetterCount = async (): Promise<CappedCount> => {
    const r = (await pool.query<{ count: number; estimate: number }>(deadLetterCountSql(s), [DEAD_LETTER_CAP + 1])).rows[0]!;
    const c = capped(r.count, DEAD_LETTER_CAP);
    return c.capped && r.estimate > DEAD_LETTER_CAP ? { ...c, estimate: Math.round(r.estimate) } : c;
  };
  const [backlog, oldest, deadLetters, parked, groups, relays, leases, flow, writer] = await Promise.all([
    backlogCount(),
    pool.query<{ seconds: number }>(oldestPendingSql(s)),
    deadLetterCount(),
    count(parkedKeyCountSql(s), PARKED_KEY_CAP),
    pool.query<{ error_name: string | null; reason: string | null; topic: string | null; count: number; grouping: number }>(deadLetterGroupsSql(s), [GROUPED_DEAD_LETTERS, GROUPS]),
    pool.query<{ relay_id: string; started_at: Date; breaker_opened_at: Date | null; heartbeat_age_seconds: number; live: boolean }>(relaysSql(s)),
    pool.query<{ shard: number; owner: string | null; valid: boolean | null }>(leasesSql(s)),
    readFlow(pool, s),
    oldestLockHolder(pool, s, true),
  ]);

  const { byOwner, unowned } = shardsByOwner(leases.rows);
  const relayViews: RelayView[] = relays.rows.map((r) => ({
    relayId: r.relay_id,
    live: r.live,
    heartbeatAgeSeconds: Number(r.heartbeat_age_seconds),
    startedAt: r.started_at,
    shards: ranges(byOwner.get(r.relay_id) ?? []),
    shardCount: byOwner.get(r.relay_id)?.length ?? 0,
    // A relay that stopped heartbeating may have opened or closed its breaker since.
    breaker: !r.live ? 'unknown' : r.breaker_opened_at ? 'open' : 'closed',
    breakerOpenedAt: r.live ? r.breaker_opened_at : null,
  }));

  // GROUPING(): 1 = (error_name, reason), 6 = (topic), 7 = () (the rows grouped). Each
  // grouping arrives ranked and cut to GROUPS (deadLetterGroupsSql).
  const byReason = groups.rows
    .filter((g) => g.grouping === 1)
    .map((g) => ({ errorName: g.error_name ?? '', reason: g.reason ?? '', count: Number(g.count) }));
  const byTopic = groups.rows.filter((g) => g.grouping === 6).map((g) => ({ topic: g.topic ?? '', count: Number(g.count) }));
  const grouped = Number(groups.rows.find((g) => g.grouping === 7)?.count ?? 0);
  const total = deadLetters;

  return {
    name: outbox.name,
    schema: outbox.schema,
    backlog,
    oldestPendingSeconds: oldest.rows[0] ? Number(oldest.rows[0].seconds) : null,
    oldestOutboxWriter: writer,
    flow,
    parkedKeys: capped(parked, PARKED_KEY_CAP),
    relays: relayViews,
    unownedShards: ranges(unowned),
    deadLetters: {
      total,
      byReason,
      byTopic,
      // Capped when there are more dead letters than were grouped.
      grouped: { count: grouped, capped: total.capped || total.count > grouped },
    },
  };
}
