/**
 * What ran, observed from outside the code under test, for the self-check (selfCheck.ts):
 * which relays were live in the lease table (RelaySightings), and in the pooler profiles
 * what went through PgBouncer (PoolerSightings): its admin console says which processes
 * are its clients, and in which pool mode; Postgres says which backends are not
 * PgBouncer's server connections. A pooler run in which a relay or a consumer was never
 * seen as a client of a transaction-mode pool, or any backend of theirs or of the writers
 * connected around PgBouncer, fails.
 */
import pg from 'pg';
import type { PgBouncer } from '../helpers/pgbouncer.js';

/** The processes looked for, by the prefix of their application_name. */
export interface Watched {
  /** A name for the report ("relay 0"). */
  name: string;
  /** application_name is this, or starts with it followed by ':'. */
  applicationName: string;
}

export interface Backend {
  pid: number;
  backend_start: string;
  application_name: string;
  client_port: number | null;
}

/** The relay slot's client id: how its rows in the lease table are told apart. */
export const relayClientId = (i: number): string => `faults-relay-${i}`;

/**
 * Which relays were actually running the relay: samples the lease table's live members
 * (outbox_relays, sql/003_relay_leases.sql) and tells the relays apart by the client id
 * that prefixes their application_name. Observation of the running system, not of its
 * source: a relay that never got as far as its first heartbeat is not counted.
 */
export class RelaySightings {
  static readonly intervalMs = 500;
  /** Client ids seen live. */
  readonly seen = new Set<string>();
  maxLiveAtOnce = 0;
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> = Promise.resolve();

  constructor(
    private readonly pool: pg.Pool,
    private readonly schema: string,
    private readonly relays: number,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.sampling = this.sampling.then(() => this.sample());
    }, RelaySightings.intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sampling;
  }

  private async sample(): Promise<void> {
    try {
      const { rows } = await this.pool.query<{ application_name: string }>(
        `SELECT application_name FROM "${this.schema}".outbox_relays
          WHERE heartbeat_at > now() - make_interval(secs => lease_ttl_ms / 1000.0)`,
      );
      const live = new Set<string>();
      for (const r of rows) {
        for (let i = 0; i < this.relays; i++) if (r.application_name.startsWith(`${relayClientId(i)}:`)) live.add(relayClientId(i));
      }
      for (const id of live) this.seen.add(id);
      this.maxLiveAtOnce = Math.max(this.maxLiveAtOnce, live.size);
    } catch {
      // Postgres restarting: the next sample will do
    }
  }
}

const matches = (applicationName: string, w: Watched): boolean =>
  applicationName === w.applicationName || applicationName.startsWith(`${w.applicationName}:`);

/** One sample of PgBouncer's admin console between two looks at pg_stat_activity. */
export interface PoolerSample {
  /** pg_stat_activity's backends of `faults-` processes, before the console was asked... */
  before: readonly Backend[];
  pools: ReadonlyArray<{ database: string; user: string; pool_mode: string }>;
  clients: ReadonlyArray<{ database: string; user: string; application_name: string | null }>;
  servers: ReadonlyArray<{ remote_pid: string | number | null }>;
  /** ...and after. */
  after: readonly Backend[];
}

/** What the samples of PgBouncer showed, counted (pure: test/unit/faultsProfile.test.ts). */
export class PoolerTally {
  /** Samples in which PgBouncer and Postgres both answered. */
  samples = 0;
  /** Times each watched process was seen as a client of a transaction-mode pool. */
  readonly throughTransactionPool = new Map<string, number>();
  /** Pool modes other than transaction each watched process was seen in. */
  readonly otherModes = new Map<string, Set<string>>();
  /** Backends of any `faults-` process (relays, consumers, writers) that are not one of
   *  PgBouncer's server connections (`SHOW SERVERS` remote_pid) in two samples in a row,
   *  by pid and start: how they were seen. */
  readonly direct = new Map<string, string>();
  /** Distinct backends of `faults-` processes seen, all told. */
  readonly backendsSeen = new Set<string>();
  private suspects = new Set<string>();

  constructor(private readonly watched: readonly Watched[]) {}

  /** Watched processes seen as clients of a transaction-mode pool and never of another mode. */
  seenInTransactionPools(names: readonly string[]): string[] {
    return names.filter((n) => (this.throughTransactionPool.get(n) ?? 0) > 0 && !this.otherModes.has(n));
  }

  record(s: PoolerSample): void {
    this.samples++;
    const modes = new Map(s.pools.map((p) => [`${p.database}/${p.user}`, p.pool_mode]));
    for (const c of s.clients) {
      const w = this.watched.find((x) => matches(c.application_name ?? '', x));
      if (!w) continue;
      const mode = modes.get(`${c.database}/${c.user}`) ?? 'unknown';
      if (mode === 'transaction') this.throughTransactionPool.set(w.name, (this.throughTransactionPool.get(w.name) ?? 0) + 1);
      else this.otherModes.set(w.name, new Set([...(this.otherModes.get(w.name) ?? []), mode]));
    }
    // A backend in both looks at Postgres was alive all along, so PgBouncer's list, taken
    // in between, had it if it was PgBouncer's.
    const serverPids = new Set(s.servers.map((x) => Number(x.remote_pid)));
    const alive = new Set(s.after.map((b) => `${b.pid}@${b.backend_start}`));
    const suspects = new Set<string>();
    for (const b of s.before) {
      const id = `${b.pid}@${b.backend_start}`;
      this.backendsSeen.add(id);
      if (!alive.has(id) || serverPids.has(b.pid)) continue;
      suspects.add(id);
      // Twice in a row: not a server connection PgBouncer was closing just then.
      if (this.suspects.has(id)) this.direct.set(id, `${b.application_name} (pid ${b.pid}, client port ${b.client_port})`);
    }
    this.suspects = suspects;
  }

  /** A sample that could not be taken: the next one starts the two-in-a-row count again. */
  missed(): void {
    this.suspects = new Set();
  }
}

/** Samples PgBouncer's admin console and Postgres' pg_stat_activity every 500 ms. */
export class PoolerSightings extends PoolerTally {
  static readonly intervalMs = 500;
  private admin: pg.Client | undefined;
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> = Promise.resolve();

  constructor(
    private readonly bouncer: PgBouncer,
    /** A direct pool to the Postgres behind it (the harness's own). */
    private readonly postgres: pg.Pool,
    watched: readonly Watched[],
  ) {
    super(watched);
  }

  start(): void {
    this.timer = setInterval(() => {
      this.sampling = this.sampling.then(() => this.sample());
    }, PoolerSightings.intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sampling;
    await this.admin?.end().catch(() => undefined);
    this.admin = undefined;
  }

  private async console(): Promise<pg.Client> {
    if (!this.admin) {
      // The admin console speaks the simple query protocol only: no parameters.
      const client = new pg.Client({ connectionString: this.bouncer.url('pgbouncer'), connectionTimeoutMillis: 2_000 });
      client.on('error', () => undefined);
      await client.connect();
      this.admin = client;
    }
    return this.admin;
  }

  private async backends(): Promise<Backend[]> {
    const { rows } = await this.postgres.query<Backend>(
      `SELECT pid, backend_start::text, application_name, client_port
         FROM pg_stat_activity WHERE application_name LIKE 'faults-%' AND backend_type = 'client backend'`,
    );
    return rows;
  }

  private async sample(): Promise<void> {
    try {
      const before = await this.backends();
      const admin = await this.console();
      const pools = (await admin.query<PoolerSample['pools'][number]>('SHOW POOLS')).rows;
      const clients = (await admin.query<PoolerSample['clients'][number]>('SHOW CLIENTS')).rows;
      const servers = (await admin.query<PoolerSample['servers'][number]>('SHOW SERVERS')).rows;
      const after = await this.backends();
      this.record({ before, pools, clients, servers, after });
    } catch {
      // PgBouncer or Postgres restarting: reconnect at the next sample
      this.missed();
      await this.admin?.end().catch(() => undefined);
      this.admin = undefined;
    }
  }
}
