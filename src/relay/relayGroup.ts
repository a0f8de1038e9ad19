import type { Kafka } from 'kafkajs';
import { createKafka } from '../shared/kafka.js';
import { ConfigError, describeError } from '../shared/errors.js';
import { TypedEmitter } from '../shared/events.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { describeDatabase } from '../shared/database.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { checkOutboxList, type OutboxDefinition } from '../shared/outboxList.js';
import { WakeUp } from './wakeUp.js';
import { OutboxPlaces, readOutboxPlace, type OutboxPlace } from './outboxPlace.js';
import * as settings from '../shared/settings.js';
import { createRelay, type Relay } from './relay.js';
import { exactlyOnceNames } from './exactlyOnceSetup.js';
import { resolveRelayOptions, withKafkaClient, type RelayOptions, type ResolvedRelayOptions } from './options.js';

/** Options of {@link createRelayGroup}: the outboxes, and the relay options they share. */
export interface RelayGroupOptions extends Omit<RelayOptions, 'databaseUrl' | 'schema'> {
  /** The outboxes to relay, each with its own database URL and schema (src/shared/outboxList.ts reads them from a file or the environment). */
  outboxes: OutboxDefinition[];
  /**
   * Most Postgres connections the relays of this process may hold in all (default 0: no
   * bound). Checked up front against {@link connectionsPerOutbox} of every outbox.
   */
  maxDatabaseConnections?: number;
}

/** The outboxes file of `run`, `status` and the operator commands (src/shared/outboxList.ts). */
export const outboxesFile = settings.text({
  option: 'outboxesFile',
  flag: '--outboxes-file',
  env: 'OUTBOX_OUTBOXES_FILE',
  description: 'JSON file listing several outboxes for one process (name, databaseUrlEnv or databaseUrlFile, schema); instead of DATABASE_URL. See docs/outboxes.md.',
});

export const maxDatabaseConnections = settings.integer({
  option: 'maxDatabaseConnections',
  flag: '--max-database-connections',
  env: 'OUTBOX_MAX_DATABASE_CONNECTIONS',
  description: 'With several outboxes: refuse to start when their relays could hold more Postgres connections than this in all (twice the batches in flight + 5 per outbox); 0 for no bound.',
  defaultValue: 0,
  min: 0,
  max: 100_000,
});

/** Where an outbox of a group stands. */
export type OutboxState = 'starting' | 'running' | 'unavailable' | 'stopped';

/** One outbox of a group as `status` and /readyz show it. */
export interface RelayGroupOutbox {
  name: string;
  schema: string;
  /** host:port/database, without user or password. */
  database: string;
  state: OutboxState;
  /** Why the outbox is unavailable (its database unreachable, its schema not migrated), never a connection string. */
  error: string | undefined;
  /** Start attempts that failed in a row. */
  failedStarts: number;
  /** The running relay, while `state` is `running`. */
  relay: Relay | undefined;
}

/** Payloads of the group's events. */
export interface RelayGroupEvents {
  /** An outbox changed state: its relay started (`running`), could not start (`unavailable`, retried), stopped. */
  outbox: { name: string; state: OutboxState; relay: Relay | undefined; error: Error | undefined };
  /** Every outbox's relay stopped; `hard` when any stopped hard. */
  stopped: { hard: boolean };
}

/**
 * Postgres connections one outbox's relay holds at most: its pool (batches in flight plus
 * the lease renewal and a spare, see Relay.start) and the horizon probe. The metrics
 * sampler and the readiness probe of `run` add one each.
 */
function connectionsPerOutbox(batchesInFlight: number, withMetrics = true): number {
  return 2 * batchesInFlight + 3 + (withMetrics ? 2 : 0);
}

/** First retry of an outbox that could not start; doubles up to retryMaxDelayMs. */
const START_RETRY_BASE_MS = 500;

/**
 * Several outboxes relayed by one process. Each outbox has a relay of its own (its own
 * pool, horizon, leases, breaker, dead letters and metrics label); they share the Kafka
 * client and the settings. Two entries reaching one outbox under different URLs are
 * refused at start (src/relay/outboxPlace.ts). An outbox whose database is unreachable or whose schema is not
 * migrated at start is `unavailable` and retried with backoff while the others run; once
 * running, a relay rides out its database going away as a single relay does (its batches
 * fail and retry, nothing is lost) and touches no other outbox.
 *
 * Create with {@link createRelayGroup}, then `start()`; `stop()` drains every outbox and
 * is idempotent.
 */
export class RelayGroup extends TypedEmitter<RelayGroupEvents> {
  /** The settings every outbox's relay gets (the first outbox's database and schema). */
  readonly options: ResolvedRelayOptions;
  private readonly logger: Logger;
  private readonly entries: RelayGroupOutbox[];
  /** Each outbox's relay options, resolved once here (TLS files read once, not at each start attempt). */
  private readonly relayOptions = new Map<string, ResolvedRelayOptions>();
  private kafkaClient: Kafka | undefined;
  private readonly stopRequested = new WakeUp();
  /** Resolves when stop() begins: what a connection attempt that may hang is raced with. */
  private readonly stopBegun: Promise<undefined>;
  private beginStop!: () => void;
  /** Where each outbox reached so far is: a second entry on one outbox is refused. */
  private readonly places = new OutboxPlaces();
  private readonly placed = new Set<string>();
  /** Relays whose start() is in progress: a stop must cut their start short too. */
  private readonly starting = new Set<Relay>();
  private loops: Promise<void>[] = [];
  private started = false;
  private stopping = false;
  private hardStop = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;

  constructor(options: RelayGroupOptions) {
    super();
    this.stopBegun = new Promise((resolve) => (this.beginStop = () => resolve(undefined)));
    const outboxes = checkOutboxList(options.outboxes);
    const { outboxes: _, maxDatabaseConnections: _bound, ...shared } = options;
    this.logger = (options.logger ?? silentLogger()).child({ component: 'relay-group' });
    // Every outbox's options are checked now, before anything connects.
    let total = 0;
    for (const o of outboxes) {
      const resolved = resolveRelayOptions({
        ...shared,
        databaseUrl: o.databaseUrl,
        schema: o.schema,
        ...(o.batchesInFlight !== undefined ? { batchesInFlight: o.batchesInFlight } : {}),
        ...(o.delivery !== undefined ? { delivery: o.delivery } : {}),
        logger: (options.logger ?? silentLogger()).child({ outbox: o.name }),
      });
      total += connectionsPerOutbox(resolved.delivery === 'exactly-once' ? resolved.exactlyOnceUnits : resolved.batchesInFlight);
      this.relayOptions.set(o.name, resolved);
    }
    refuseSharedTransactionalIds(outboxes, this.relayOptions);
    const bound = settings.optionValue(maxDatabaseConnections, options.maxDatabaseConnections);
    if (bound > 0) {
      if (total > bound) {
        throw new ConfigError(
          'maxDatabaseConnections',
          `is ${bound}, but ${outboxes.length} outboxes need up to ${total} connections (twice the batches in flight + 5 each): lower batchesInFlight, raise the bound, or run several processes`,
        );
      }
    }
    this.options = this.relayOptions.get(outboxes[0]!.name)!;
    this.entries = outboxes.map((o) => ({
      name: o.name,
      schema: o.schema,
      database: describeDatabase(o.databaseUrl),
      state: 'starting' as OutboxState,
      error: undefined,
      failedStarts: 0,
      relay: undefined,
    }));
  }

  /** Every outbox and where it stands, in the order configured. */
  get outboxes(): readonly Readonly<RelayGroupOutbox>[] {
    return this.entries.map((e) => ({ ...e }));
  }

  /** The Kafka client the relays share (after `start()`). */
  get kafka(): Kafka | undefined {
    return this.kafkaClient;
  }

  /**
   * Start every outbox. Resolves once each has made its first attempt: running, or
   * unavailable and retrying in the background. Never rejects for one outbox's database.
   *
   * @throws ConfigError when two entries of the list reach one outbox (the same server,
   *   database and schema under different URLs); nothing has started then
   */
  async start(): Promise<void> {
    if (this.started) throw new ConfigError('relayGroup', 'already started');
    this.started = true;
    // Every outbox's place first, before any relay starts, so that a list naming one
    // outbox twice is refused whole; an outbox not reached now is placed before its
    // relay's first start, later.
    const probes = await this.untilStopped(Promise.allSettled(this.entries.map((e) => this.readPlace(e.name))));
    if (probes === undefined) {
      for (const e of this.entries) e.state = 'stopped';
      return;
    }
    const firstErrors = probes.map((p, i) => {
      if (p.status === 'rejected') return p.reason as unknown;
      this.places.claim(this.entries[i]!.name, p.value);
      this.placed.add(this.entries[i]!.name);
      return undefined;
    });
    const o = this.options;
    this.kafkaClient = o.kafka ?? createKafka({ brokers: o.kafkaBrokers, clientId: o.clientId, logger: o.logger, ...o.kafkaSecurity });
    const firstAttempts = this.entries.map(() => {
      let done!: () => void;
      const p = new Promise<void>((resolve) => (done = resolve));
      return { p, done };
    });
    this.loops = this.entries.map((entry, i) => this.runOutbox(entry, firstAttempts[i]!.done, firstErrors[i]));
    await Promise.all(firstAttempts.map((f) => f.p));
    this.logger.info(
      { outboxes: this.entries.map((e) => ({ name: e.name, state: e.state, schema: e.schema, database: e.database })) },
      'relay group started',
    );
  }

  private readPlace(name: string): Promise<OutboxPlace> {
    const o = this.relayOptions.get(name)!;
    return readOutboxPlace(o.databaseUrl, o.schema, `${o.clientId}:place-probe`);
  }

  /** `work`'s result, or undefined as soon as stop() begins (a hung database must not hold a stop up). */
  private untilStopped<T>(work: Promise<T>): Promise<T | undefined> {
    work.catch(() => undefined);
    return Promise.race([work, this.stopBegun]);
  }

  /**
   * Stop every outbox: each relay finishes its batches in flight (within its
   * shutdownTimeoutMs), unavailable outboxes stop retrying. Idempotent.
   */
  stop(): Promise<{ hard: boolean }> {
    this.stopPromise ??= this.doStop();
    return this.stopPromise;
  }

  /** Hard stop of every outbox: abandon batches in flight now (they are published again later). */
  abort(): Promise<{ hard: boolean }> {
    this.hardStop = true;
    for (const e of this.entries) void e.relay?.abort();
    return this.stop();
  }

  private async doStop(): Promise<{ hard: boolean }> {
    this.stopping = true;
    this.beginStop();
    this.stopRequested.notify();
    // A relay still starting (its database hung, say) gives up at once; runOutbox sees the stop.
    for (const relay of this.starting) void (this.hardStop ? relay.abort() : relay.stop());
    const outcomes = await Promise.all(this.entries.map((e) => (this.hardStop ? e.relay?.abort() : e.relay?.stop())));
    await Promise.all(this.loops);
    const hard = this.hardStop || outcomes.some((r) => r?.hard === true);
    this.emit('stopped', { hard });
    return { hard };
  }

  /**
   * Start one outbox's relay, retrying with backoff until it starts or the group stops.
   * `firstError`: why start() could not reach its database, the first failed attempt.
   */
  private async runOutbox(entry: RelayGroupOutbox, attempted: () => void, firstError: unknown): Promise<void> {
    const options = withKafkaClient(this.relayOptions.get(entry.name)!, this.kafkaClient);
    let failure = firstError;
    while (!this.stopping) {
      if (failure !== undefined) {
        const retryInMs = this.markUnavailable(entry, failure);
        failure = undefined;
        attempted();
        await this.stopRequested.wait(retryInMs);
        continue;
      }
      if (!this.placed.has(entry.name)) {
        let place: OutboxPlace | undefined;
        try {
          place = await this.untilStopped(this.readPlace(entry.name));
        } catch (error) {
          failure = error;
          continue;
        }
        if (place === undefined) break;
        try {
          this.places.claim(entry.name, place);
          this.placed.add(entry.name);
        } catch (error) {
          // A configuration error, not a database one: retrying cannot fix it. The outbox
          // stays unavailable (its /readyz check failing) until the list is fixed.
          entry.state = 'unavailable';
          entry.error = describeError(error);
          this.logger.error({ outbox: entry.name, err: entry.error }, 'outbox refused: another outbox of the list is the same one; it is not relayed twice');
          this.emit('outbox', { name: entry.name, state: 'unavailable', relay: undefined, error: error as Error });
          attempted();
          await this.stopBegun;
          break;
        }
      }
      const relay = createRelay(options, { outboxName: entry.name });
      this.starting.add(relay);
      try {
        await relay.start();
      } catch (error) {
        if (this.stopping) break;
        failure = error;
        continue;
      } finally {
        this.starting.delete(relay);
      }
      if (this.stopping) {
        // stop() came while this relay was starting: doStop did not see it.
        await (this.hardStop ? relay.abort() : relay.stop());
        break;
      }
      const stopped = new Promise<void>((resolve) => relay.once('stopped', () => resolve()));
      entry.relay = relay;
      entry.state = 'running';
      entry.error = undefined;
      if (entry.failedStarts > 0) this.logger.info({ outbox: entry.name, failedStarts: entry.failedStarts }, 'outbox available again: its relay started');
      entry.failedStarts = 0;
      this.emit('outbox', { name: entry.name, state: 'running', relay, error: undefined });
      attempted();
      await stopped;
      break;
    }
    attempted();
    entry.relay = undefined;
    entry.state = 'stopped';
    this.emit('outbox', { name: entry.name, state: 'stopped', relay: undefined, error: undefined });
  }

  /** Record a failed start attempt; returns how long to wait before the next. */
  private markUnavailable(entry: RelayGroupOutbox, error: unknown): number {
    entry.failedStarts++;
    const first = entry.state !== 'unavailable';
    entry.state = 'unavailable';
    entry.error = describeError(error);
    const retryInMs = backoffDelayMs(entry.failedStarts - 1, START_RETRY_BASE_MS, this.options.retryMaxDelayMs) + START_RETRY_BASE_MS;
    // Warn when it becomes unavailable; the retries after that are debug noise.
    this.logger[first ? 'warn' : 'debug']({ outbox: entry.name, err: entry.error, attempt: entry.failedStarts, retryInMs }, 'outbox unavailable: its relay could not start; the other outboxes go on, this one is retried');
    this.emit('outbox', { name: entry.name, state: 'unavailable', relay: undefined, error: error as Error });
    return retryInMs;
  }

  protected override listenerFailed(event: string, error: unknown): void {
    this.logger.error({ event, err: describeError(error) }, 'a relay group event listener threw; ignored');
  }
}

/**
 * Exactly-once outboxes of one group share the transactional id prefix (a setting of the
 * group) and tell their Kafka names apart by schema alone: two in different databases
 * with one schema name would take the same transactional ids and progress group, and
 * their relays would fence each other and read each other's progress.
 *
 * @throws ConfigError naming both outboxes
 */
function refuseSharedTransactionalIds(outboxes: readonly OutboxDefinition[], resolved: ReadonlyMap<string, ResolvedRelayOptions>): void {
  const byUnit = new Map<string, string>();
  for (const o of outboxes) {
    const r = resolved.get(o.name)!;
    if (r.delivery !== 'exactly-once') continue;
    const unit = exactlyOnceNames(r.transactionalIdPrefix, r.schema).transactionalId(0);
    const other = byUnit.get(unit);
    if (other !== undefined) {
      throw new ConfigError(
        `outbox ${o.name}`,
        `is exactly-once in schema ${r.schema}, as outbox ${other} is, under one transactional id prefix: both would use the transactional ids ${unit.replace(/0$/, 'N')} and fence each other; give one another schema, or run it in a process of its own with its own --transactional-id-prefix`,
      );
    }
    byUnit.set(unit, o.name);
  }
}

/** Create a relay group over several outboxes; call `start()` on it. Options are validated here. */
export function createRelayGroup(options: RelayGroupOptions): RelayGroup {
  return new RelayGroup(options);
}
