import type pg from 'pg';
import type { Logger } from '../shared/logger.js';
import { wantedShards } from './shards.js';
import {
  acquireSql,
  beginMembershipSql,
  forgetDeadRelaysSql,
  heartbeatSql,
  knownRelaysSql,
  leaveSql,
  liveRelaysSql,
  lockStaleOwnersSql,
  lockWantedSql,
  ownedSql,
  releaseSql,
  terminateOwnerSql,
  unexpiredOldLeasesSql,
} from './sql/leases.js';

/**
 * How long a takeover waits for each of the stale owner's connections to exit. Short on
 * purpose: a round that outlasts the TTL delays this relay's next heartbeat, which is what
 * keeps its own leases live, and another relay could take its shards. A connection still there is
 * signalled again next round, and its shards are not claimed until it is gone.
 */
const TERMINATE_WAIT_MS = 100;

/** What one membership round changed. */
export interface MembershipChange {
  acquired: number[];
  /** Shards taken from an owner whose lease had expired. */
  takenOver: Array<{ shard: number; from: string }>;
  lost: number[];
  liveRelays: number;
}

/**
 * Which shards this relay owns, kept in step with the other relays through the lease
 * table, on the database's clock.
 *
 * Every round (a third of the lease TTL): heartbeat, which keeps every lease it holds live
 * (a lease is live while its owner's heartbeat is: ./sql/leases.ts, liveLeasesSql);
 * compute this relay's fair share from the live relays (shard s goes to live relay number
 * s mod n, relays sorted by id); take the wanted shards that are free or whose owner's
 * heartbeat lapsed. Before
 * claiming a shard taken from an expired owner, the owner's Postgres connections are
 * terminated and confirmed gone: a relay that stalled (SIGSTOP, a long GC pause) keeps its
 * connections and the row locks of a claimed batch; skipping those rows would publish
 * that key's later rows first, and waiting would wait for ever.
 *
 * Shards it holds but no longer wants are released by the worker that handles them,
 * between two batches, so a shard never changes hands with a batch in flight.
 */
export class Membership {
  /** Shards this relay holds a lease on and may claim rows of. */
  readonly owned = new Set<number>();
  /** This relay's fair share at the last round. */
  wanted = new Set<number>();
  /** Shards taken over whose previous owner's connections are not confirmed gone yet. */
  private readonly unfenced = new Map<number, { from: string; applicationName: string | null; takenAt: Date }>();
  /** Backends terminated so far for a takeover not yet fenced, by stale owner. */
  private readonly signalled = new Map<string, Set<number>>();
  private readonly s: string;

  constructor(
    quotedSchema: string,
    readonly relayId: string,
    private readonly applicationName: string,
    private readonly leaseTtlMs: number,
    private readonly logger: Logger,
    /** When the relay's circuit breaker opened, or null while closed: sent with every heartbeat. */
    private readonly breakerOpenedAt: () => Date | null = () => null,
    /** A relay's fair share: every n-th shard, or whole units in exactly-once mode (./units.ts). */
    private readonly wantedShardsOf: (index: number, count: number) => Set<number> = wantedShards,
  ) {
    this.s = quotedSchema;
  }

  /** One round on `client` (a pooled connection, not in a transaction). */
  async tick(client: pg.ClientBase): Promise<MembershipChange> {
    // The heartbeat commits on its own, first: it is what keeps this relay's leases live,
    // so the rest of the round failing (a lock timeout) must not undo it. It is bounded
    // like the round: a taker holds a stale owner's row locked while it takes its shards,
    // and an operator's session may hold it too.
    await client.query(beginMembershipSql(this.leaseTtlMs));
    try {
      await client.query(heartbeatSql(this.s), [this.relayId, this.applicationName, this.leaseTtlMs, this.breakerOpenedAt()]);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
    const live = (await client.query<{ relay_id: string }>(liveRelaysSql(this.s))).rows.map((r) => r.relay_id);
    const index = live.indexOf(this.relayId);
    // Our own heartbeat just committed, so we are live unless the clock jumped.
    const n = Math.max(1, live.length);
    const wanted = this.wantedShardsOf(Math.max(0, index), n);
    this.wanted = wanted;

    const takeovers: Array<{ shard: number; from: string; applicationName: string | null; takenAt: Date }> = [];
    let held: number[] = [];
    let acquired: number[] = [];
    await client.query(beginMembershipSql(this.leaseTtlMs));
    try {
      held = (await client.query<{ shard: number }>(ownedSql(this.s), [this.relayId])).rows.map((r) => r.shard);
      const candidates = await this.lockAvailable(client, wanted);
      acquired = candidates.map((r) => r.shard);
      let takenAt = new Date(0);
      if (acquired.length > 0) {
        const r = await client.query<{ taken_at: Date }>(acquireSql(this.s), [this.relayId, acquired]);
        takenAt = r.rows[0]!.taken_at;
      }
      await client.query('COMMIT');
      for (const c of candidates) {
        if (c.owner !== null) takeovers.push({ shard: c.shard, from: c.owner, applicationName: c.owner_application_name, takenAt });
      }
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }

    // Fence the stale owners before their shards are claimed: this round's takeovers and
    // any earlier ones whose fencing has not succeeded yet.
    for (const t of takeovers) this.unfenced.set(t.shard, { from: t.from, applicationName: t.applicationName, takenAt: t.takenAt });
    const heldNow = new Set([...held, ...acquired]);
    for (const shard of this.unfenced.keys()) if (!heldNow.has(shard)) this.unfenced.delete(shard);
    const owners = new Map<string, { applicationName: string | null; takenAt: Date }>();
    for (const { from, applicationName, takenAt } of this.unfenced.values()) {
      const known = owners.get(from);
      if (!known || known.takenAt < takenAt) owners.set(from, { applicationName, takenAt });
    }
    const fenced = new Set<string>();
    for (const [from, { takenAt }] of owners) {
      const { rows } = await client.query<{ survivors: number; pids: number[] }>(terminateOwnerSql, [from, TERMINATE_WAIT_MS, takenAt]);
      // A backend slow to exit is signalled again next round, or is gone by then: the log
      // line counts every backend terminated for this takeover, over all its rounds.
      const signalled = this.signalled.get(from) ?? new Set<number>();
      for (const pid of rows[0]!.pids) signalled.add(pid);
      this.signalled.set(from, signalled);
      if (rows[0]!.survivors === 0) {
        fenced.add(from);
        this.signalled.delete(from);
        this.logger.warn({ staleRelay: from, connectionsTerminated: signalled.size }, 'took over shards of a relay whose lease expired');
      } else {
        this.logger.error({ staleRelay: from, survivors: rows[0]!.survivors }, "could not terminate a stale relay's connections; not claiming its shards yet");
      }
    }
    const takenOver: Array<{ shard: number; from: string }> = [];
    for (const [shard, { from }] of this.unfenced) {
      if (fenced.has(from)) {
        takenOver.push({ shard, from });
        this.unfenced.delete(shard);
      }
    }
    await client.query(forgetDeadRelaysSql(this.s));

    const before = new Set(this.owned);
    this.owned.clear();
    for (const shard of heldNow) if (!this.unfenced.has(shard)) this.owned.add(shard);
    return {
      acquired: [...this.owned].filter((s) => !before.has(s)),
      takenOver,
      lost: [...before].filter((s) => !this.owned.has(s)),
      liveRelays: live.length,
    };
  }

  /**
   * In the round's transaction: lock the wanted shards this relay does not own and return
   * those it may take, with their owner. A shard is free, or its owner has left (no
   * membership row), or its owner's heartbeat lapsed: that owner's row is then locked
   * until the round commits (./sql/leases.ts, lockStaleOwnersSql, says why).
   */
  private async lockAvailable(
    client: pg.ClientBase,
    wanted: Set<number>,
  ): Promise<Array<{ shard: number; owner: string | null; owner_application_name: string | null }>> {
    const locked = (await client.query<{ shard: number; owner: string | null }>(lockWantedSql(this.s), [this.relayId, [...wanted]])).rows;
    const owners = [...new Set(locked.flatMap((r) => (r.owner === null ? [] : [r.owner])))];
    if (owners.length === 0) return locked.map((r) => ({ ...r, owner_application_name: null }));
    const known = new Map(
      (await client.query<{ relay_id: string; application_name: string }>(knownRelaysSql(this.s), [owners])).rows.map((r) => [r.relay_id, r.application_name]),
    );
    const stale = new Set((await client.query<{ relay_id: string }>(lockStaleOwnersSql(this.s), [owners])).rows.map((r) => r.relay_id));
    const taken = locked.filter((r) => r.owner !== null).map((r) => r.shard);
    const unexpired = new Set((await client.query<{ shard: number }>(unexpiredOldLeasesSql(this.s), [taken])).rows.map((r) => r.shard));
    return locked
      .filter((r) => r.owner === null || ((!known.has(r.owner) || stale.has(r.owner)) && !unexpired.has(r.shard)))
      .map((r) => ({ ...r, owner_application_name: r.owner === null ? null : (known.get(r.owner) ?? null) }));
  }

  /** Give back shards this relay holds but no longer wants; call with no batch in flight on them. */
  async release(client: pg.ClientBase | pg.Pool, shards: number[]): Promise<void> {
    if (shards.length === 0) return;
    await client.query(releaseSql(this.s), [this.relayId, shards]);
    for (const s of shards) this.owned.delete(s);
  }

  /** Leave the group: release every shard and the membership row (best effort on stop). */
  async leave(client: pg.ClientBase | pg.Pool): Promise<void> {
    await client.query(leaveSql(this.s), [this.relayId]);
    this.owned.clear();
  }

  /** Forget every lease in memory (after losing the database for longer than the TTL). */
  dropAll(): void {
    this.owned.clear();
  }
}
