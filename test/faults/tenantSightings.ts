/**
 * What the tenant relays did with their connection budget, seen from outside the code
 * under test (tenant profiles, selfCheck's tenant lines): Postgres' pg_stat_activity,
 * sampled every 250 ms, tells each relay process' connections apart by the client id that
 * starts their application_name, and by their client port, which the harness looks up
 * among the sockets of the slot's current process (/proc): a connection the relay opens
 * under another name (the databases rule's discovery connects as
 * `outbox-relay:tenant-discovery`) still counts against its budget. From the same samples:
 * which tenants each process served at once, and which relays were running the tenant
 * relay (its control connection, `<client id>:tenants`).
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import pg from 'pg';
import { CONNECTIONS_PER_TENANT, OWN_CONNECTIONS } from './tenantSelfCheck.js';

/** One client backend, as pg_stat_activity shows it. */
export interface ActivityRow {
  datname: string | null;
  application_name: string;
  client_port: number | null;
  /** backend_start, epoch ms. */
  started_ms: number;
}

/** A relay slot's current process at the time of a sample. */
export interface RelayProcessView {
  /** The prefix of its application_names (OUTBOX_CLIENT_ID). */
  clientId: string;
  /** When it was spawned, epoch ms: a backend older than that is a killed predecessor's. */
  spawnedAt: number;
  /** Local ports of its TCP connections to the Postgres port (undefined: no process). */
  ports: ReadonlySet<number> | undefined;
}

/** The counts the samples add up to (pure; the tenant self-check reads it). */
export class BudgetTally {
  samples = 0;
  /** The most connections one sample showed of each slot's process: by name, and by name or port. */
  readonly mostByName: number[];
  readonly most: number[];
  /** The most tenant databases each slot's process was serving (a relay's own connections) in one sample. */
  readonly mostTenantsAtOnce: number[];
  /** Tenant databases each slot was seen serving, over the run. */
  readonly servedBy = new Map<string, Set<number>>();
  /** Slots seen with their control connection open. */
  readonly running = new Set<number>();
  maxRunningAtOnce = 0;
  /** Application names of connections found by port only (named without the client id). */
  readonly unnamed = new Map<string, number>();
  /** Samples in which a process held more than the budget, for the report. */
  readonly overBudget: string[] = [];
  /** Samples in which a process held connections of more tenants than its budget has room for. */
  readonly overTenants: string[] = [];
  private readonly tenantsAllowed: number;

  constructor(
    private readonly budget: number,
    slots: number,
  ) {
    this.mostByName = Array.from({ length: slots }, () => 0);
    this.most = Array.from({ length: slots }, () => 0);
    this.mostTenantsAtOnce = Array.from({ length: slots }, () => 0);
    this.tenantsAllowed = Math.floor((budget - OWN_CONNECTIONS) / CONNECTIONS_PER_TENANT);
  }

  record(rows: readonly ActivityRow[], processes: readonly RelayProcessView[]): void {
    this.samples++;
    let runningNow = 0;
    processes.forEach((p, i) => {
      const prefix = `${p.clientId}:`;
      const named = (r: ActivityRow): boolean => r.application_name.startsWith(prefix) && r.started_ms >= p.spawnedAt;
      const byPort = (r: ActivityRow): boolean => r.client_port !== null && (p.ports?.has(r.client_port) ?? false);
      const mine = rows.filter((r) => named(r) || byPort(r));
      for (const r of mine) if (!named(r)) this.unnamed.set(r.application_name, (this.unnamed.get(r.application_name) ?? 0) + 1);
      this.mostByName[i] = Math.max(this.mostByName[i]!, rows.filter(named).length);
      this.most[i] = Math.max(this.most[i]!, mine.length);
      if (mine.length > this.budget && this.overBudget.length < 5) this.overBudget.push(`${p.clientId}: ${mine.length} (${mine.map((r) => `${r.application_name}@${r.datname}`).join(', ')})`);
      // A tenant's relay names its connections <client id>:<instance>[:horizon]; the
      // relay's own are :tenants (control), :tenant-check and :tenant-discovery (the check
      // of a database the rule found, whether it holds an outbox: a CI run counted one as a
      // third tenant served beside two, 3 of the budget's 2).
      const serving = new Set(mine.filter((r) => named(r) && !/:(tenants|tenant-check|tenant-discovery)$/.test(r.application_name) && r.datname !== null).map((r) => r.datname!));
      this.mostTenantsAtOnce[i] = Math.max(this.mostTenantsAtOnce[i]!, serving.size);
      if (serving.size > this.tenantsAllowed && this.overTenants.length < 5) this.overTenants.push(`${new Date().toISOString()} ${p.clientId}: ${mine.map((r) => `${r.application_name}@${r.datname} since ${new Date(r.started_ms).toISOString()}`).join(', ')}`);
      for (const d of serving) this.servedBy.set(d, new Set([...(this.servedBy.get(d) ?? []), i]));
      if (mine.some((r) => r.application_name === `${p.clientId}:tenants`)) {
        this.running.add(i);
        runningNow++;
      }
    });
    this.maxRunningAtOnce = Math.max(this.maxRunningAtOnce, runningNow);
  }
}

/** Local ports of `pid`'s TCP connections to `remotePort` (from /proc; empty if it is gone). */
export function portsOf(pid: number, remotePort: number): Set<number> {
  const inodes = new Set<string>();
  try {
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) inodes.add(m[1]!);
      } catch {
        // closed meanwhile
      }
    }
  } catch {
    return new Set();
  }
  const ports = new Set<number>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !inodes.has(f[9]!)) continue;
      const local = parseInt(f[1]!.split(':')[1]!, 16);
      const remote = parseInt(f[2]!.split(':')[1]!, 16);
      if (remote === remotePort) ports.add(local);
    }
  }
  return ports;
}

/** Samples pg_stat_activity and the relays' sockets every 250 ms until stopped. */
export class BudgetSightings extends BudgetTally {
  static readonly intervalMs = 250;
  private timer: NodeJS.Timeout | undefined;
  private sampling: Promise<void> = Promise.resolve();
  private readonly pool: pg.Pool;
  private readonly port: number;

  constructor(
    /** The server's maintenance database (never cut off nor dropped). */
    url: string,
    budget: number,
    private readonly relays: () => ReadonlyArray<{ clientId: string; pid: number | undefined; spawnedAt: number }>,
  ) {
    super(budget, relays().length);
    this.pool = new pg.Pool({ connectionString: url, max: 1, application_name: 'faults-budget-sampler' });
    this.pool.on('error', () => undefined);
    this.port = Number(new URL(url).port || 5432);
  }

  start(): void {
    this.timer = setInterval(() => {
      this.sampling = this.sampling.then(() => this.sample());
    }, BudgetSightings.intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sampling;
    await this.pool.end().catch(() => undefined);
  }

  private async sample(): Promise<void> {
    try {
      // Sockets before and after the snapshot: a connection seen in Postgres was open at one of them.
      const relays = this.relays();
      const before = relays.map((r) => (r.pid === undefined ? undefined : portsOf(r.pid, this.port)));
      const { rows } = await this.pool.query<ActivityRow>(
        `SELECT datname, application_name, client_port, extract(epoch FROM backend_start) * 1000 AS started_ms
           FROM pg_stat_activity WHERE backend_type = 'client backend'`,
      );
      const views = relays.map((r, i) => {
        const after = r.pid === undefined ? undefined : portsOf(r.pid, this.port);
        const ports = before[i] || after ? new Set([...(before[i] ?? []), ...(after ?? [])]) : undefined;
        return { clientId: r.clientId, spawnedAt: r.spawnedAt, ports };
      });
      this.record(
        rows.map((r) => ({ ...r, started_ms: Number(r.started_ms) })),
        views,
      );
    } catch {
      // the next sample will do
    }
  }
}
