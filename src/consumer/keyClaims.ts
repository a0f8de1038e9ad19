import type pg from 'pg';
import { quoteIdentifier } from '../shared/identifiers.js';
import { claimKeysSql, unclaimKeysSql } from './sql/processedMessages.js';
import type { Prepared } from './prepare.js';

/**
 * The idempotency keys of a consumer group in processed_messages: claimed in the
 * transaction that handles their messages, taken back when a message fails.
 */
export class KeyClaims {
  private readonly claimSql: string;
  private readonly unclaimSql: string;
  /** Per partition: keys to take back (see giveBack) that could not be yet. */
  private readonly pendingGiveBacks = new Map<string, string[]>();

  constructor(schema: string, private readonly groupId: string) {
    const quotedSchema = quoteIdentifier(schema, 'schema');
    this.claimSql = claimKeysSql(quotedSchema);
    this.unclaimSql = unclaimKeysSql(quotedSchema);
  }

  /**
   * Record the group's idempotency keys (one statement). The first occurrence of a key in
   * offset order is the one that runs; a later one in the same group (a relay that
   * published twice) is a duplicate like any other.
   * @returns each key's first index, and the keys that were new (claimed here)
   */
  async claim<V>(client: pg.PoolClient, prepared: Prepared<V>[]): Promise<{ firstIndex: Map<string, number>; claimed: Set<string> }> {
    const firstIndex = new Map<string, number>();
    for (let i = 0; i < prepared.length; i++) {
      const key = (prepared[i] as Prepared<V>).message.idempotencyKey;
      if (key !== undefined && !firstIndex.has(key)) firstIndex.set(key, i);
    }
    const claimed = new Set<string>();
    if (firstIndex.size > 0) {
      const { rows } = await client.query<{ key: string }>(this.claimSql, [this.groupId, [...firstIndex.keys()]]);
      for (const row of rows) claimed.add(row.key);
    }
    return { firstIndex, claimed };
  }

  /** Take keys back inside the open transaction (their messages did not run, or failed). */
  async unclaim(client: pg.PoolClient, keys: string[]): Promise<void> {
    if (keys.length > 0) await client.query(this.unclaimSql, [this.groupId, keys]);
  }

  /**
   * Delete claimed keys in a transaction of their own, after a handler ended the one that
   * claimed them. Until it worked they are remembered and deleted before the partition's
   * next transaction: left there, they would make their messages duplicates.
   */
  async giveBack(pool: pg.Pool, topic: string, partition: number, keys: string[]): Promise<void> {
    const tp = `${topic}\u0000${partition}`;
    const all = [...(this.pendingGiveBacks.get(tp) ?? []), ...keys];
    if (all.length === 0) return;
    this.pendingGiveBacks.set(tp, all);
    await pool.query(this.unclaimSql, [this.groupId, all]);
    this.pendingGiveBacks.delete(tp);
  }
}
