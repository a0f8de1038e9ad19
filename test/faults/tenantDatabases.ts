/**
 * The tenants of a tenant profile's run: a database per tenant on the suite's Postgres,
 * its outbox migrated (with or without the insert trigger), its own Kafka topic, its own
 * writers; and what the tenant faults do to them: a tenant added while the others write,
 * one dropped once its rows are all sent, a database cut off and let back.
 */
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { waitFor } from '../helpers/wait.js';
import { readOutbox, type OutboxRow } from './checker.js';
import type { Profile } from './profiles.js';
import { Random, type Fault } from './schedule.js';
import { migrateSchemaAsync } from './snapshot.js';
import type { TenantOrigin } from './tenantChecker.js';
import { startWorkload, type Workload } from './workload.js';

/** The row column `topic` of every tenant's rows; its Kafka topic is `{tenant}.orders`. */
export const ROW_TOPIC = 'orders';

/** One tenant of the run, as planned from the profile and the schedule. */
export interface TenantPlan {
  index: number;
  /** Its database's name, which the relays' rule makes the tenant's name. */
  name: string;
  trigger: boolean;
  /** When its writers start and end, ms after the writers' start. */
  fromMs: number;
  toMs: number;
  /** Rows its writers commit: its share of the profile's, by the time it writes. */
  rows: number;
  added: boolean;
  dropped: boolean;
}

/** The tenants a run has, from the profile and its schedule's tenant faults (pure). */
export function planTenants(p: Profile, faults: readonly Fault[], prefix: string): TenantPlan[] {
  const setup = p.tenants;
  if (!setup) throw new Error('not a tenant profile');
  const added = new Map(faults.flatMap((f) => (f.kind === 'tenant-add' ? [[f.tenant, f.atMs] as const] : [])));
  const dropped = new Map(faults.flatMap((f) => (f.kind === 'tenant-drop' ? [[f.tenant, f.atMs] as const] : [])));
  const count = setup.initial + added.size;
  const spans = Array.from({ length: count }, (_, i) => ({ fromMs: added.get(i) ?? 0, toMs: dropped.get(i) ?? p.writeMs }));
  const total = spans.reduce((n, s) => n + (s.toMs - s.fromMs), 0);
  return spans.map((s, index) => ({
    index,
    name: `${prefix}_t${index}`,
    trigger: !setup.withoutTrigger.includes(index),
    ...s,
    rows: Math.max(1, Math.round((p.rows * (s.toMs - s.fromMs)) / total)),
    added: added.has(index),
    dropped: dropped.has(index),
  }));
}

interface Live {
  plan: TenantPlan;
  pool: pg.Pool;
  workload?: Workload;
  createdAt?: number;
  droppedAt?: number;
  /** A dropped tenant's outbox, read once its rows were all sent, just before the drop. */
  outboxAtDrop?: OutboxRow[];
}

export interface TenantDatabasesOptions {
  codeDir: string;
  /** A URL of the suite's Postgres (its database is replaced). */
  serverUrl: string;
  /** The outbox's schema in every tenant database (the relays' --schema). */
  schema: string;
  brokers: string[];
  profile: Profile;
  seed: number;
  log(line: string): void;
}

export class TenantDatabases {
  private readonly tenants = new Map<number, Live>();
  /** On the server's maintenance database, never cut off nor dropped. */
  readonly admin: pg.Pool;

  constructor(private readonly o: TenantDatabasesOptions) {
    this.admin = new pg.Pool({ connectionString: this.url('postgres'), max: 3, application_name: 'faults-tenants' });
    this.admin.on('error', () => undefined);
  }

  url(database: string): string {
    const u = new URL(this.o.serverUrl);
    u.pathname = `/${database}`;
    return u.toString();
  }

  topicOf(plan: TenantPlan): string {
    return `${plan.name}.${ROW_TOPIC}`;
  }

  keyPrefixOf(plan: TenantPlan): string {
    return `t${plan.index}-`;
  }

  /** Database, migrated outbox (its trigger if planned), topic: a tenant the relays' rule finds. */
  async create(plan: TenantPlan): Promise<void> {
    await this.admin.query(`CREATE DATABASE "${plan.name}"`);
    await migrateSchemaAsync(this.o.codeDir, this.url(plan.name), this.o.schema, plan.trigger);
    const admin = new Kafka({ clientId: 'faults-admin', brokers: this.o.brokers, logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic: this.topicOf(plan), numPartitions: this.o.profile.partitions, replicationFactor: 1 }], waitForLeaders: true });
    } finally {
      await admin.disconnect();
    }
    const pool = new pg.Pool({ connectionString: this.url(plan.name), max: 2, application_name: 'faults-tenants' });
    pool.on('error', () => undefined);
    this.tenants.set(plan.index, { plan, pool, createdAt: Date.now() });
  }

  /** Its writers, for `durationMs` from now, its planned rows. */
  startWriters(plan: TenantPlan, durationMs: number): Workload {
    const p = this.o.profile;
    const live = this.live(plan.index);
    live.workload = startWorkload({
      databaseUrl: this.url(plan.name),
      schema: this.o.schema,
      topic: ROW_TOPIC,
      rows: plan.rows,
      writers: Math.max(1, Math.floor(p.writers / (p.tenants?.initial ?? 1))),
      keyPrefix: this.keyPrefixOf(plan),
      keys: p.keys,
      hotKeys: p.hotKeys,
      hotShare: p.hotShare,
      maxRowsPerTransaction: p.maxRowsPerTransaction,
      holdChance: p.holdChance,
      holdMinMs: p.holdMinMs,
      holdMaxMs: p.holdMaxMs,
      rollbackChance: p.rollbackChance,
      durationMs,
      deadlineMs: durationMs * 3 + 60_000,
      random: new Random((this.o.seed ^ 0x5eed) + plan.index),
      log: this.o.log,
    });
    return live.workload;
  }

  /**
   * Drop a tenant the way an operator would: its writers done (their share ends at the
   * drop), every row of it sent, then DROP DATABASE … WITH (FORCE), which ends the
   * relays' connections to it. Its outbox is read first: its rows still count.
   */
  async drop(plan: TenantPlan, dropping: () => void): Promise<void> {
    const live = this.live(plan.index);
    await live.workload?.done;
    await waitFor(`every row of tenant ${plan.index} sent`, async () => (await this.unsent(live)) === 0, { timeoutMs: 60_000, intervalMs: 200 });
    live.outboxAtDrop = await readOutbox(live.pool, this.o.schema);
    await live.pool.end();
    dropping();
    await this.admin.query(`DROP DATABASE "${plan.name}" WITH (FORCE)`);
    live.droppedAt = Date.now();
  }

  /** Cut tenant `index`'s database off (no new connections, its backends terminated), or let it back. */
  async cut(index: number, cut: boolean): Promise<void> {
    const { plan } = this.live(index);
    await this.admin.query(`ALTER DATABASE "${plan.name}" ALLOW_CONNECTIONS ${cut ? 'false' : 'true'}`);
    if (cut) await this.admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [plan.name]);
  }

  private async unsent(live: Live): Promise<number> {
    const { rows } = await live.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${this.o.schema}".outbox WHERE sent_at IS NULL`);
    return rows[0]!.n;
  }

  /** Whether every tenant still there has all its rows sent. */
  async drained(): Promise<boolean> {
    for (const live of this.tenants.values()) {
      if (live.droppedAt === undefined && (await this.unsent(live)) > 0) return false;
    }
    return true;
  }

  /** Tenants with the insert trigger and without, counted in their databases (what was migrated, not what was planned). */
  async triggers(): Promise<{ with: number; without: number }> {
    const out = { with: 0, without: 0 };
    for (const live of this.tenants.values()) {
      if (live.droppedAt !== undefined) continue;
      const { rows } = await live.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_trigger WHERE tgname = 'outbox_notify_insert' AND NOT tgisinternal");
      if (rows[0]!.n > 0) out.with++;
      else out.without++;
    }
    return out;
  }

  get(index: number): Readonly<Live> | undefined {
    return this.tenants.get(index);
  }

  /** Every tenant ever created, for the checker: its topic, keys and rows (a dropped one's as read before its drop). */
  async origins(): Promise<TenantOrigin[]> {
    const out: TenantOrigin[] = [];
    for (const live of [...this.tenants.values()].sort((a, b) => a.plan.index - b.plan.index)) {
      const w = live.workload?.stats;
      out.push({
        tenant: live.plan.name,
        topic: this.topicOf(live.plan),
        keyPrefix: this.keyPrefixOf(live.plan),
        outbox: live.outboxAtDrop ?? (await readOutbox(live.pool, this.o.schema)),
        writers: { committed: w?.committed ?? [], rolledBack: w?.rolledBack ?? [], unknown: w?.unknown ?? [] },
      });
    }
    return out;
  }

  /** Every workload started. */
  workloads(): Workload[] {
    return [...this.tenants.values()].flatMap((l) => (l.workload ? [l.workload] : []));
  }

  /** Close the pools and drop every tenant database left. */
  async close(): Promise<void> {
    for (const live of this.tenants.values()) {
      if (live.droppedAt !== undefined) continue;
      await live.pool.end().catch(() => undefined);
      await this.admin.query(`DROP DATABASE IF EXISTS "${live.plan.name}" WITH (FORCE)`).catch(() => undefined);
    }
    await this.admin.end();
  }

  private live(index: number): Live {
    const live = this.tenants.get(index);
    if (!live) throw new Error(`tenant ${index} was not created`);
    return live;
  }
}
