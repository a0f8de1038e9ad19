import { createKafka } from '../shared/kafka.js';
import { describeError } from '../shared/errors.js';
import { TypedEmitter } from '../shared/events.js';
import { backoffDelayMs } from '../shared/backoff.js';
import type { Logger } from '../shared/logger.js';
import { createRelay, type Relay } from '../relay/relay.js';
import { createMessageProducer, type MessageProducer } from '../relay/producer.js';
import { resolveRelayOptions, type ResolvedRelayOptions } from '../relay/options.js';
import { WakeUp } from '../relay/wakeUp.js';
import { CONTROL_CONNECTIONS, resolveTenantRelayOptions, type ResolvedTenantRelayOptions, type TenantRelayOptions } from './options.js';
import { databaseUrlOf, discoverTenants, ruleDatabase, type Tenant } from './discovery.js';
import { tenantNameProblem, tenantProducer } from './naming.js';
import { ControlConnection } from './controlConnection.js';
import { createTenantEncoding, type TenantEncoding } from './tenantEncoding.js';
import { TenantActivity } from './activity.js';

/**
 * Where a tenant stands: `idle` (nothing to publish, no connection held), `waiting` (rows
 * to publish, waiting for a turn within the connection budget), `starting`, `serving`
 * (its relay runs), `releasing` (its relay stops: idle, or its turn is over),
 * `unavailable` (its relay could not start; retried with backoff).
 */
export type TenantState = 'idle' | 'waiting' | 'starting' | 'serving' | 'releasing' | 'unavailable';

/** One tenant as {@link TenantRelay.tenants} shows it. */
export interface TenantStatus {
  name: string;
  database: string;
  schema: string;
  state: TenantState;
  /** Why it is unavailable, never a connection string. */
  error: string | undefined;
  /** Rows published since the tenant relay started. */
  published: number;
  /** Turns served since the tenant relay started. */
  turns: number;
}

/** Payloads of the tenant relay's events. */
export interface TenantRelayEvents {
  /** A tenant changed state. */
  tenant: { name: string; state: TenantState; error: string | undefined };
  /** A tenant's batch was published (rows per topic, as named in Kafka). */
  batch: { tenant: string; count: number; topics: Record<string, number>; createdAtMs: number[]; ackedAtMs: number };
  /** The rule was evaluated: who came, who went, which rows it passed over. */
  discovery: { tenants: number; added: string[]; removed: string[]; refused: Array<{ row: string; reason: string }> };
  /** Everything stopped; `hard` when a tenant's relay stopped hard. */
  stopped: { hard: boolean };
}

interface Entry {
  tenant: Tenant;
  state: TenantState;
  relay: Relay | undefined;
  servedSinceMs: number;
  lastActivityMs: number;
  /** Its schema was found migrated by its first relay: later turns start without the check. */
  schemaChecked: boolean;
  /** Its relay's options, resolved at its first turn and kept for the next ones. */
  relayOptions: ResolvedRelayOptions | undefined;
  /** Batches published in the current turn: a tenant that has not published yet is not "quiet", only starting. */
  batchesThisTurn: number;
  /** A notification came while the relay was releasing: look again at once. */
  woken: boolean;
  removed: boolean;
  failedStarts: number;
  retryAtMs: number;
  error: string | undefined;
  published: number;
  turns: number;
}

/** How often the scheduler looks at the tenants being served (idle, turn over). */
const SERVING_TICK_MS = 100;
/**
 * While tenants wait for room, a served tenant that published nothing for this long is
 * released at once: it has likely caught up, and holding its connections for the whole
 * tenantIdleMs would make the waiting tenants wait that long too.
 */
const CONTENDED_IDLE_MS = 200;
/** The pause before each send of a tenant served past its turn while others have just started (see TenantRelay.pace). */
export const PACE_MS = 25;

/**
 * Whether a send of `tenant` waits PACE_MS: it has been served past its turn while another
 * tenant is starting, waits for room, or was served less than a turn ago.
 */
export function paceWanted(
  tenant: { state: TenantState; servedSinceMs: number },
  all: ReadonlyArray<{ state: TenantState; servedSinceMs: number }>,
  nowMs: number,
  turnMs: number,
): boolean {
  if (nowMs - tenant.servedSinceMs < turnMs) return false;
  return all.some((o) => o !== tenant && (o.state === 'starting' || o.state === 'waiting' || (o.state === 'serving' && nowMs - o.servedSinceMs < turnMs)));
}

/**
 * Many tenants' outboxes relayed by one process within one connection budget: tenants
 * are found by a rule (src/tenants/options.ts), idle ones cost no connection, and a
 * tenant with rows to publish gets a relay of its own (its pool, leases, horizon, dead
 * letters in its own schema) for as long as it has work, or for one turn while others
 * wait. Every tenant's relay publishes through one shared producer, naming topics and
 * keys per tenant (./naming.ts).
 *
 * Create with {@link createTenantRelay}, then `start()`; `stop()` drains every tenant
 * being served and is idempotent.
 */
export class TenantRelay extends TypedEmitter<TenantRelayEvents> {
  readonly options: ResolvedTenantRelayOptions;
  private readonly logger: Logger;
  private readonly entries = new Map<string, Entry>();
  /** Tenants waiting for a turn, oldest first. */
  private queue: Entry[] = [];
  private used = 0;
  private producer: MessageProducer | undefined;
  private control: ControlConnection | undefined;
  /** One encoder for every tenant's relay, when encodings are configured (./tenantEncoding.ts). */
  private readonly encoding: TenantEncoding | undefined;
  private activity: TenantActivity | undefined;
  private readonly changed = new WakeUp();
  private readonly stopRequested = new WakeUp();
  private loops: Promise<void>[] = [];
  private started = false;
  private stopping = false;
  private hard = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;
  private readonly here: string;
  private lastRefused = 0;
  /** Discovery and the checks share one connection slot of the budget: one at a time. */
  private checks: Promise<unknown> = Promise.resolve();

  constructor(options: TenantRelayOptions) {
    super();
    this.options = resolveTenantRelayOptions(options);
    this.logger = this.options.logger.child({ component: 'tenant-relay' });
    this.here = ruleDatabase(this.options.rule.databaseUrl);
    const { encodings } = this.options.relay;
    this.encoding = encodings && createTenantEncoding(encodings, this.options.naming);
  }

  /** Postgres connections the tenant relay may hold now at most (its own, and the relays' of the tenants it serves). */
  get connectionsInUse(): number {
    return CONTROL_CONNECTIONS + this.used;
  }

  /** Whether the control connection (LISTEN, discovery, checks) is open. */
  get controlConnected(): boolean {
    return this.control?.current !== undefined;
  }

  /** Rows the rule's last evaluation passed over. */
  get refusedTenants(): number {
    return this.lastRefused;
  }

  /**
   * Rows waiting (up to `cap`) in each tenant that is not idle (idle tenants have none by
   * definition): what the top-tenants gauge shows. Runs on the tenant relay's own
   * connections, inside the budget.
   */
  async backlogs(cap = 100_000): Promise<Map<string, number>> {
    const busy = [...this.entries.values()].filter((e) => e.state !== 'idle').map((e) => e.tenant);
    return this.activity ? this.activity.backlogs(busy, cap) : new Map();
  }

  /** Every tenant found, with its state. */
  tenants(): TenantStatus[] {
    return [...this.entries.values()].map((e) => ({
      name: e.tenant.name,
      database: e.tenant.database,
      schema: e.tenant.schema,
      state: e.state,
      error: e.error,
      published: e.published,
      turns: e.turns,
    }));
  }

  /**
   * Connect, evaluate the rule, look for waiting rows in every tenant, and start serving.
   *
   * @throws ConnectionError when the rule's database cannot be reached; ConfigError when
   *   Postgres refuses the rule's pattern or query.
   */
  async start(): Promise<void> {
    if (this.started) throw new Error('tenant relay already started');
    this.started = true;
    const o = this.options;
    this.control = new ControlConnection(o.rule.databaseUrl, `${o.relay.clientId}:tenants`, this.logger, (schema) => this.notified(schema), () => this.sweepSoon());
    await this.control.start();
    try {
      await this.discover();
    } catch (error) {
      await this.control.stop();
      throw error;
    }
    try {
      await this.encoding?.start(this.logger);
    } catch (error) {
      await this.control.stop();
      throw error;
    }
    const kafka = createKafka({ brokers: o.relay.kafkaBrokers, clientId: o.relay.clientId, logger: o.relay.logger, ...o.relay.kafkaSecurity });
    this.producer = createMessageProducer(kafka, o.relay);
    this.activity = new TenantActivity(this.control, this.here, o, this.logger, (t) => this.wake(t), () => [...this.entries.values()].filter((e) => e.state === 'idle').map((e) => e.tenant), (work) => this.withCheckSlot(work));
    this.loops = [this.schedule(), this.every(o.discoveryIntervalMs, () => this.discover()), this.every(o.sweepIntervalMs, () => this.activity!.sweep()), this.every(o.activityIntervalMs, () => this.activity!.poll())];
    await this.activity.sweep().catch((error: unknown) => this.logger.warn({ err: describeError(error) }, 'tenant relay: the first sweep failed; the next one retries'));
    this.logger.info({ tenants: this.entries.size, maxDatabaseConnections: o.maxDatabaseConnections }, 'tenant relay started');
  }

  /** Evaluate the rule now (it also runs every discoveryIntervalMs): tenants found are served, tenants gone are released. */
  async discover(): Promise<void> {
    const control = this.control;
    if (!control?.current) throw new Error('the control connection is down');
    const known = new Set([...this.entries.values()].map((e) => e.tenant.database));
    const found = await this.withCheckSlot(() => discoverTenants(this.options.rule, (sql, params) => control.query(sql, params), known, `${this.options.relay.clientId}:tenant-discovery`));
    const refused = [...found.refused];
    const seen = new Map<string, Tenant>();
    for (const t of found.tenants) {
      const problem = tenantNameProblem(this.options.naming, t.name) ?? (seen.has(t.name) ? `tenant ${JSON.stringify(t.name)} is found twice` : undefined);
      if (problem) refused.push({ row: t.name, reason: problem });
      else seen.set(t.name, t);
    }
    const added: string[] = [];
    const removed: string[] = [];
    for (const [name, e] of this.entries) {
      const now = seen.get(name);
      if (now && now.database === e.tenant.database && now.schema === e.tenant.schema) continue;
      removed.push(name);
      this.remove(e);
    }
    for (const [name, t] of seen) {
      if (this.entries.has(name)) continue;
      added.push(name);
      this.entries.set(name, { tenant: t, state: 'idle', relay: undefined, servedSinceMs: 0, lastActivityMs: 0, batchesThisTurn: 0, schemaChecked: false, relayOptions: undefined, woken: false, removed: false, failedStarts: 0, retryAtMs: 0, error: undefined, published: 0, turns: 0 });
      // Rows may be waiting already: a new tenant is looked at once.
      if (this.started && this.producer) this.wake(t);
    }
    for (const r of refused) this.logger.warn(r, 'tenant relay: the rule found a tenant it cannot serve; passed over');
    this.lastRefused = refused.length;
    if (added.length > 0 || removed.length > 0) this.logger.info({ tenants: this.entries.size, added: added.length, removed: removed.length }, 'tenants changed');
    this.emit('discovery', { tenants: this.entries.size, added, removed, refused });
  }

  private remove(e: Entry): void {
    e.removed = true;
    this.entries.delete(e.tenant.name);
    this.queue = this.queue.filter((q) => q !== e);
    this.logger.info({ tenant: e.tenant.name, database: e.tenant.database, schema: e.tenant.schema }, 'tenant released: the rule no longer finds it');
    if (e.state === 'serving') void this.release(e);
    // A start in progress releases itself when it ends (see serve()).
  }

  /** The tenant has rows to publish (a notification, a counter moved, a sweep found rows). */
  private wake(t: Tenant): void {
    const e = this.entries.get(t.name);
    if (!e || e.removed || this.stopping) return;
    if (e.state === 'idle') {
      this.setState(e, 'waiting');
      this.queue.push(e);
      this.changed.notify();
    } else if (e.state === 'serving') e.lastActivityMs = Date.now();
    else if (e.state === 'releasing' || e.state === 'starting') e.woken = true;
  }

  private notified(schema: string): void {
    for (const e of this.entries.values()) if (e.tenant.database === this.here && e.tenant.schema === schema) this.wake(e.tenant);
  }

  private sweepSoon(): void {
    if (this.activity) void this.activity.sweep().catch((error: unknown) => this.logger.warn({ err: describeError(error) }, 'tenant relay: sweep failed'));
  }

  private setState(e: Entry, state: TenantState, error?: string): void {
    e.state = state;
    e.error = error;
    // The scheduler sleeps long while no tenant is served: a change wakes it.
    this.changed.notify();
    this.emit('tenant', { name: e.tenant.name, state, error });
  }

  /** One slot of the budget for discovery and checks: they run one at a time. */
  private withCheckSlot<T>(work: () => Promise<T>): Promise<T> {
    const run = this.checks.then(work, work);
    this.checks = run.catch(() => undefined);
    return run;
  }

  private async every(intervalMs: number, work: () => Promise<void>): Promise<void> {
    while (!this.stopping) {
      await this.stopRequested.wait(intervalMs);
      if (this.stopping) return;
      await work().catch((error: unknown) => this.logger.warn({ err: describeError(error) }, 'tenant relay: a periodic check failed; the next one retries'));
    }
  }

  /**
   * The scheduler: starts waiting tenants while the budget allows; releases tenants idle
   * for tenantIdleMs; when tenants wait and the budget is spent, ends the turn of the
   * tenant served longest (past tenantTurnMs), which goes to the back of the queue.
   */
  private async schedule(): Promise<void> {
    const o = this.options;
    while (!this.stopping) {
      const now = Date.now();
      for (const e of this.entries.values()) {
        if (e.state === 'unavailable' && now >= e.retryAtMs) {
          this.setState(e, 'waiting', e.error);
          this.queue.push(e);
        }
        if (e.state === 'serving' && now - e.lastActivityMs >= o.tenantIdleMs) void this.release(e);
      }
      while (this.queue.length > 0) {
        if (this.used + o.connectionsPerTenant <= o.maxDatabaseConnections - CONTROL_CONNECTIONS) {
          void this.serve(this.queue.shift()!);
          continue;
        }
        // Room goes first to a tenant waiting while a served one has gone quiet (no batch
        // for CONTENDED_IDLE_MS): only without others waiting may it keep its connections
        // for the whole tenantIdleMs. Else the tenant served longest past its turn gives
        // way, and goes back to the end of the queue if rows are left (release() looks).
        const serving = [...this.entries.values()].filter((e) => e.state === 'serving');
        const quiet = serving.filter((e) => e.batchesThisTurn > 0 && now - e.lastActivityMs >= Math.min(CONTENDED_IDLE_MS, o.tenantIdleMs)).sort((a, b) => a.lastActivityMs - b.lastActivityMs)[0];
        const longest = serving.filter((e) => now - e.servedSinceMs >= o.tenantTurnMs).sort((a, b) => a.servedSinceMs - b.servedSinceMs)[0];
        const giving = quiet ?? longest;
        if (giving) void this.release(giving);
        break;
      }
      const busy = [...this.entries.values()].some((e) => e.state !== 'idle');
      await this.changed.wait(busy || this.queue.length > 0 ? SERVING_TICK_MS : 60_000);
    }
  }

  private async serve(e: Entry): Promise<void> {
    const o = this.options;
    this.used += o.connectionsPerTenant;
    this.setState(e, 'starting');
    e.woken = false;
    const t = e.tenant;
    e.relayOptions ??= resolveRelayOptions({ ...o.relay, databaseUrl: databaseUrlOf(o.rule.databaseUrl, t.database), schema: t.schema, logger: o.relay.logger.child({ tenant: t.name }) });
    const relay = createRelay(e.relayOptions, { producer: tenantProducer(this.producer!, o.naming, t.name, () => this.pace(e)), schemaChecked: e.schemaChecked, ...(this.encoding && { encoding: this.encoding.forTenant(t.name) }) });
    relay.on('batch', (b) => {
      e.lastActivityMs = Date.now();
      e.batchesThisTurn++;
      e.published += b.count;
      this.emit('batch', { tenant: t.name, count: b.count, topics: b.topics, createdAtMs: b.createdAtMs, ackedAtMs: b.ackedAtMs });
    });
    relay.on('batchError', () => (e.lastActivityMs = Date.now()));
    e.relay = relay;
    try {
      await relay.start();
    } catch (error) {
      e.relay = undefined;
      this.used -= o.connectionsPerTenant;
      if (e.removed || this.stopping) return;
      const retryInMs = backoffDelayMs(e.failedStarts++, 500, o.relay.retryMaxDelayMs) + 500;
      e.retryAtMs = Date.now() + retryInMs;
      this.logger.warn({ tenant: t.name, err: describeError(error), retryInMs }, 'tenant relay: a tenant could not be served; retrying');
      this.setState(e, 'unavailable', describeError(error));
      this.changed.notify();
      return;
    }
    e.failedStarts = 0;
    e.schemaChecked = true;
    e.turns++;
    e.batchesThisTurn = 0;
    e.servedSinceMs = e.lastActivityMs = Date.now();
    this.setState(e, 'serving');
    if (e.removed || this.stopping) void this.release(e);
  }

  /**
   * Hold back a send of a tenant served past its turn while another tenant has just
   * started or waits: one tenant's backlog takes the CPU (the relay process, Postgres and
   * Kafka share it) the others need for their fresh rows. Each of its sends waits PACE_MS
   * meanwhile, about half its pace when draining (a batch takes about 30 ms here).
   */
  private async pace(e: Entry): Promise<void> {
    if (paceWanted(e, [...this.entries.values()], Date.now(), this.options.tenantTurnMs)) await this.stopRequested.wait(PACE_MS);
  }

  /** Stop a tenant's relay (it drains), give its connections back, and decide whether it waits again. */
  private async release(e: Entry): Promise<void> {
    if (e.state !== 'serving' || !e.relay) return;
    const relay = e.relay;
    this.setState(e, 'releasing');
    const { hard } = this.hard ? await relay.abort() : await relay.stop();
    if (hard) this.hard = true;
    e.relay = undefined;
    this.used -= this.options.connectionsPerTenant;
    this.changed.notify();
    if (e.removed || this.stopping) return this.setState(e, 'idle');
    if (e.woken || (await this.activity!.hasRows(e.tenant).catch(() => true))) {
      e.woken = false;
      this.setState(e, 'waiting');
      this.queue.push(e);
      this.changed.notify();
    } else {
      this.setState(e, 'idle');
    }
  }

  /**
   * Stop serving: every tenant's relay drains (or, after a second call or
   * {@link TenantRelay.abort}, stops hard), then the shared producer and the control
   * connection close. Idempotent.
   */
  stop(): Promise<{ hard: boolean }> {
    this.stopPromise ??= this.doStop();
    return this.stopPromise;
  }

  /** Hard stop: every tenant's relay abandons its batches in flight (nothing is lost: they roll back). */
  abort(): Promise<{ hard: boolean }> {
    this.hard = true;
    for (const e of this.entries.values()) void e.relay?.abort();
    return this.stop();
  }

  private async doStop(): Promise<{ hard: boolean }> {
    this.stopping = true;
    this.stopRequested.notify();
    this.changed.notify();
    await Promise.all(this.loops);
    const relays = [...this.entries.values()].map((e) => e.relay).filter((r): r is Relay => r !== undefined);
    const results = await Promise.all(relays.map((r) => (this.hard ? r.abort() : r.stop())));
    if (results.some((r) => r.hard)) this.hard = true;
    await this.checks;
    await Promise.all([this.producer?.disconnect().catch(() => undefined), this.control?.stop(), this.encoding?.close()]);
    this.logger.info({ hard: this.hard }, 'tenant relay stopped');
    this.emit('stopped', { hard: this.hard });
    return { hard: this.hard };
  }

  protected override listenerFailed(event: string, error: unknown): void {
    this.logger.error({ event, err: describeError(error) }, 'a tenant relay event listener threw; ignored');
  }
}

/** Create a tenant relay; call `start()` on it. Options are validated here. */
export function createTenantRelay(options: TenantRelayOptions): TenantRelay {
  return new TenantRelay(options);
}
