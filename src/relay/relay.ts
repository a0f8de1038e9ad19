import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { Kafka } from 'kafkajs';
import { quoteIdentifier } from '../shared/identifiers.js';
import { connectionError, createPool, describeDatabase, endPool } from '../shared/database.js';
import { assertRelaySchema } from '../shared/schema.js';
import { OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { createKafka } from '../shared/kafka.js';
import { TypedEmitter } from '../shared/events.js';
import { Horizon } from './horizon.js';
import { IdAudit } from './idAudit.js';
import { WakeUp } from './wakeUp.js';
import { settlesWithin } from '../shared/deadline.js';
import { backoffDelayMs } from '../shared/backoff.js';
import type { RelayRuntime } from './relayRuntime.js';
import { runHorizonLoop } from './horizonLoop.js';
import { runMembershipLoop } from './membershipLoop.js';
import { runBreakerLoop } from './breakerLoop.js';
import { runWorkerLoop } from './workerLoop.js';
import { runPartitionLoop } from './partitionLoop.js';
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from './options.js';
import { Membership } from './membership.js';
import { CircuitBreaker } from './breaker.js';
import { FlowRecorder } from './flowRecorder.js';
import { createMessageProducer, type MessageProducer } from './producer.js';
import { newWorker, type Worker } from './batch.js';
import { newClaimFloor, type ClaimFloor } from './floor.js';
import { LowWaterMark } from './lowWater.js';
import type { RelayEvents } from './relayEvents.js';
import { publishRelayStarted } from '../shared/diagnostics.js';
import { poolerRefused, probePooler } from './poolerProbe.js';
import { setUpExactlyOnce, type ExactlyOnce } from './exactlyOnceSetup.js';
import { wantedUnitShards } from './units.js';
import { wantedShards } from './shards.js';
import { installLibraryGuard, runAsLibraryGuardOwner } from '../shared/libraryGuard.js';
import { guardPoolCalls } from '../shared/guardedPool.js';
import { relayLibraryGuardOwner } from './libraryErrors.js';
import { encodingStep, type EncodingStep } from './encodingStep.js';
import type { RelayResources } from './relayResources.js';

export type { RelayEvents } from './relayEvents.js';
export type { RelayResources } from './relayResources.js';

/** What everything after a hard stop (or the shutdown timeout) may take before it is left behind. */
const CLOSE_AFTER_HARD_STOP_MS = 500;
/**
 * The relay: moves committed outbox rows to Kafka in id order per key.
 *
 * Create with {@link createRelay}, then `start()`; `stop()` drains and is idempotent.
 */
export class Relay extends TypedEmitter<RelayEvents> {
  readonly options: ResolvedRelayOptions;
  /** Identifies this relay instance in logs and in Postgres' application_name. */
  readonly instanceId = randomUUID().replaceAll('-', '').slice(0, 12);
  private readonly logger: Logger;
  private readonly quotedSchema: string;
  private readonly horizon: Horizon;
  /** Looks for rows with ids above the sequence (set by hand), which the horizon never releases. */
  private readonly idAudit: IdAudit;
  private readonly membership: Membership;
  /** Opens when Kafka keeps refusing batches; see {@link CircuitBreaker}. */
  readonly breaker: CircuitBreaker;
  /** Rows published and dead-lettered per minute, for the console (flowRecorder.ts). */
  private readonly flow: FlowRecorder;
  private kafkaClient: Kafka | undefined;
  /** Notified when the horizon moves (and on stop). */
  private readonly workAvailable = new WakeUp();
  /** Notified only on stop: cuts retry sleeps short without waking them on new work. */
  private readonly stopRequested = new WakeUp();
  /** Notified when the horizon probe reaches the database again after failing (and on stop). */
  private readonly databaseBack = new WakeUp();
  /** Notified when the breaker opens (and on stop). */
  private readonly breakerOpened = new WakeUp();
  private pool: pg.Pool | undefined;
  /** Statements go in full, none prepared: connections through a transaction pooler (poolerProbe.ts). */
  private inlineStatements: boolean;
  private producer: MessageProducer | undefined;
  /** Exactly-once mode's units and what they share, once started. */
  private exactlyOnce: ExactlyOnce | undefined;
  /** Schema-registry encodings of the rows' values and keys, when configured (docs/encodings.md). */
  private readonly encoding: EncodingStep | undefined;
  private workers: Worker[] = [];
  /** Where each worker's next claim starts (floor.ts). */
  private readonly floors = new Map<Worker, ClaimFloor>();
  private loops: Promise<void>[] = [];
  private stopping = false;
  private aborted = false;
  private started = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;
  /** Removes this relay from the process-wide guard against client libraries' throws (../shared/libraryGuard.ts). */
  private uninstallLibraryGuard: (() => void) | undefined;
  private starting: Promise<void> | undefined;
  /** Resolves when a stop begins: what a start in progress races against. */
  private readonly stopSignal: Promise<void>;
  private signalStop!: () => void;
  /** Resolves on abort(), or when the shutdown timeout cuts a stop short. */
  private readonly abortSignal: Promise<void>;
  private signalAbort!: () => void;

  private readonly resources: RelayResources;
  constructor(options: RelayOptions | ResolvedRelayOptions, resources: RelayResources = {}) {
    super();
    this.resources = resources;
    // Stopping also wakes every loop asleep on a wake-up, so it sees `stopping` at once.
    const wakeEveryLoop = (): void => [this.workAvailable, this.stopRequested, this.databaseBack, this.breakerOpened].forEach((w) => w.notify());
    this.stopSignal = new Promise<void>((resolve) => (this.signalStop = () => (resolve(), wakeEveryLoop())));
    this.abortSignal = new Promise<void>((resolve) => (this.signalAbort = resolve));
    this.options = resolveRelayOptions(options);
    if (resources.producer && this.exactlyOnceMode) throw new OutboxError('a relay given a producer publishes at least once only', { retriable: false });
    this.quotedSchema = quoteIdentifier(this.options.schema, 'schema');
    this.inlineStatements = this.options.pooler === 'transaction';
    this.encoding = resources.encoding ?? encodingStep(this.options.encodings, resources.outboxName ?? this.options.schema);
    this.logger = this.options.logger.child({ component: 'relay', relay: this.instanceId });
    this.horizon = new Horizon(this.quotedSchema, this.options.horizonMaxWaitMs);
    this.idAudit = new IdAudit(this.quotedSchema);
    this.breaker = new CircuitBreaker(this.options.breakerFailures);
    this.membership = new Membership(
      this.quotedSchema,
      this.instanceId,
      this.applicationName,
      this.options.leaseTtlMs,
      this.logger,
      () => (this.breaker.openedAtMs === undefined ? null : new Date(this.breaker.openedAtMs)),
      this.exactlyOnceMode ? wantedUnitShards(this.options.exactlyOnceUnits) : wantedShards,
    );
    this.flow = new FlowRecorder(this.quotedSchema, this.instanceId);
    // Counted from the relay's own events, after commit: the batch's path is unchanged.
    this.on('batch', (b) => this.flow.sent(b.count));
    this.on('deadLetter', () => this.flow.deadLettered(1));
  }

  /** Whether this relay publishes in Kafka transactions (the `delivery` option). */
  get exactlyOnceMode(): boolean { return this.options.delivery === 'exactly-once'; }

  /** Concurrent batch runners: batchesInFlight, or one per unit in exactly-once mode. */
  private get workerCount(): number { return this.exactlyOnceMode ? this.options.exactlyOnceUnits : this.options.batchesInFlight; }

  /** Prefix of the application_name of every connection: how a successor finds them. */
  get applicationName(): string { return `${this.options.clientId}:${this.instanceId}`; }

  /** Shards this relay currently owns. */
  get ownedShards(): number[] { return [...this.membership.owned].sort((a, b) => a - b); }

  /** Highest outbox id the relay may claim up to (see the visibility horizon in horizon.ts). */
  get watermark(): number { return this.horizon.watermark; }

  /** Highest outbox id at or below which every row is committed or rolled back (`settled` in horizon.ts; 0 until known). */
  get settledId(): number { return this.horizon.settled; }

  /** How long the oldest new ids have waited for the transactions before them to end, in ms (0: nothing waits). */
  get horizonWaitMs(): number { return this.horizon.oldestWaitMs(); }

  /** The kafkajs client the relay publishes with (after `start()`), for health checks. */
  get kafka(): Kafka | undefined { return this.kafkaClient; }

  /**
   * Check the database and schema, then start relaying. Resolves once work has begun.
   *
   * @throws ConnectionError when Postgres cannot be reached; SchemaError when the schema
   *   is not migrated. Kafka being down is not fatal: batches retry until it is back.
   */
  async start(): Promise<void> {
    if (this.started) throw new OutboxError('relay already started', { retriable: false });
    this.started = true;
    // Until the stop, a client library's throw fails its calls in flight, never the process.
    const owner = relayLibraryGuardOwner(this.logger, (e) => this.emit('libraryError', e));
    this.uninstallLibraryGuard = installLibraryGuard(owner);
    this.starting = runAsLibraryGuardOwner(owner, () => this.doStart()).catch((error: unknown) => {
      this.uninstallLibraryGuard?.();
      throw error;
    });
    return this.starting;
  }

  private async doStart(): Promise<void> {
    if (this.stopping) throw stoppedWhileStarting();
    const o = this.options;
    // Two connections a worker (its batch being published and the next, claimed ahead:
    // workerLoop.ts), the lease renewal and one spare; the horizon probe has its own.
    const pool = guardPoolCalls(createPool(o.databaseUrl, this.applicationName, 2 * this.workerCount + 2, this.logger));
    this.pool = pool;
    try {
      // A Postgres that accepts and never answers holds connect() until its timeout: a
      // stop meanwhile must not wait for it.
      const client = await this.unlessStopped(pool.connect(), (late) => late.release(true)).catch((error: unknown) => {
        throw this.stopping ? error : connectionError(o.databaseUrl, error);
      });
      try {
        if (!this.resources.schemaChecked) await this.unlessStopped(assertRelaySchema(client, o.schema));
      } finally {
        // Destroyed rather than returned when the stop cut the check short: its query may still run.
        client.release(this.stopping ? true : undefined);
      }
      if (o.pooler !== 'transaction') {
        const found = await this.unlessStopped(probePooler(pool));
        if (found.transactionPooling) {
          if (o.pooler === 'none') throw poolerRefused(found.evidence);
          this.inlineStatements = true;
          this.logger.info(
            { evidence: found.evidence },
            'Postgres connections go through a transaction-pooling proxy: the relay keeps nothing in a session (no prepared statements); --pooler transaction says so and skips this probe',
          );
        }
      }
      if (this.encoding && !this.resources.encoding) await this.unlessStopped(this.encoding.start(this.logger));
    } catch (error) {
      this.pool = undefined;
      if (this.stopping) {
        // A connect still pending ends at its own timeout; nothing waits for it.
        void pool.end().catch(() => undefined);
        throw stoppedWhileStarting();
      }
      await pool.end().catch(() => undefined);
      throw error;
    }

    const kafka = o.kafka ?? createKafka({ brokers: o.kafkaBrokers, clientId: o.clientId, logger: o.logger, ...o.kafkaSecurity });
    this.kafkaClient = kafka;
    if (this.exactlyOnceMode) {
      try {
        this.exactlyOnce = await this.setUpExactlyOnce(kafka);
      } catch (error) {
        this.pool = undefined;
        await pool.end().catch(() => undefined);
        throw this.stopping ? stoppedWhileStarting() : error;
      }
    }
    this.producer = this.resources.producer ?? createMessageProducer(kafka, o);

    this.workers = Array.from({ length: this.workerCount }, (_, index) => newWorker(index, this.workerCount));
    for (const w of this.workers) this.floors.set(w, newClaimFloor());
    const rt = this.runtime();
    this.loops = [runHorizonLoop(rt), runMembershipLoop(rt), runBreakerLoop(rt), runPartitionLoop(rt), ...this.workers.map((w) => runWorkerLoop(rt, w))];
    // Before the log line: whoever waits for the line (a test harness that then SIGKILLs
    // the process) must find the diagnostics message's subscribers done.
    publishRelayStarted({ producer: this.producer.adapter, schema: o.schema, delivery: o.delivery, ...(this.exactlyOnceMode && { units: o.exactlyOnceUnits }) });
    this.logger.info(
      {
        database: describeDatabase(o.databaseUrl),
        brokers: o.kafkaBrokers,
        schema: o.schema,
        batchSize: o.batchSize,
        batchesInFlight: this.workerCount,
        producer: this.producer.adapter,
        delivery: o.delivery,
      },
      'relay started',
    );
  }

  /**
   * Exactly-once mode's start-up checks and units. A refusal (a setting, a permission)
   * fails the start; Kafka not answering (a broker down at start) is retried with backoff
   * until it does or a stop begins, as batches are in the default mode.
   */
  private async setUpExactlyOnce(kafka: Kafka): Promise<ExactlyOnce> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.unlessStopped(setUpExactlyOnce(kafka, this.options, this.instanceId, this.logger), (late) => void late.close());
      } catch (error) {
        if (this.stopping || !(error instanceof OutboxError) || !error.retriable) throw error;
        const retryInMs = backoffDelayMs(attempt, 500, this.options.retryMaxDelayMs);
        this.logger.warn({ err: describeError(error), attempt: attempt + 1, retryInMs }, 'exactly-once delivery: Kafka did not answer the start-up checks; retrying');
        await this.sleep(retryInMs);
      }
    }
  }

  /**
   * Stop claiming, let the batches in flight finish (publish, mark, commit), disconnect.
   * After `shutdownTimeoutMs` (or {@link Relay.abort}) in-flight batches are abandoned:
   * their transactions roll back and the rows are published again by the next relay.
   * Idempotent: every call returns the same promise.
   */
  stop(): Promise<{ hard: boolean }> {
    if (!this.stopPromise) this.stopPromise = this.doStop();
    return this.stopPromise;
  }

  /** Hard stop: abandon in-flight batches now. Safe at any time; nothing is lost. */
  abort(): Promise<{ hard: boolean }> {
    this.abortWork();
    return this.stop();
  }

  private async doStop(): Promise<{ hard: boolean }> {
    this.stopping = true;
    this.signalStop();
    const deadline = Date.now() + this.options.shutdownTimeoutMs;
    // A start in progress gives up at once (unlessStopped) or has just finished.
    await this.starting?.catch(() => undefined);
    // abort() during a soft stop cuts this wait short too.
    const drained = await settlesWithin(Promise.race([Promise.all(this.loops), this.abortSignal]), deadline - Date.now());
    if (!drained && !this.aborted) {
      this.logger.warn({ shutdownTimeoutMs: this.options.shutdownTimeoutMs }, 'shutdown timeout: abandoning batches in flight');
      this.abortWork();
    }
    const hard = this.aborted;
    // Leases, batches on their way and disconnecting share one budget, not one each (that
    // made a hard stop take up to 1 s past the timeout); a server that never answers is left behind.
    const closeDeadline = hard ? Date.now() + CLOSE_AFTER_HARD_STOP_MS : Math.max(deadline, Date.now() + CLOSE_AFTER_HARD_STOP_MS);
    const budgetMs = (): number => Math.max(0, closeDeadline - Date.now());
    if (!hard && this.pool) {
      const pool = this.pool;
      // The counts of the minute so far, then hand the shards over now rather than after the lease TTL.
      const leave = this.flow
        .write(pool, true)
        .catch((error: unknown) => this.logger.warn({ err: describeError(error) }, 'could not record the last per-minute counts'))
        .then(() => this.membership.leave(pool))
        .catch((error: unknown) => {
          this.logger.warn({ err: describeError(error) }, 'could not release shard leases; they expire by themselves');
        });
      if (!(await settlesWithin(leave, budgetMs()))) this.logger.warn('giving the shard leases back took too long; they expire by themselves');
    }
    // After a hard stop, batches may still be on their way (a Kafka request in flight): let
    // them end before their clients close, within the same budget, so that none of them
    // opens a connection again afterwards.
    if (hard) await settlesWithin(Promise.all(this.loops), budgetMs());
    const closeMs = budgetMs();
    const [producerClosed, poolClosed] = await Promise.all([
      settlesWithin(Promise.all([this.resources.producer ? undefined : this.producer?.disconnect(), this.exactlyOnce?.close(), this.resources.encoding ? undefined : this.encoding?.close()]), closeMs),
      settlesWithin(this.pool ? endPool(this.pool) : Promise.resolve(), closeMs),
    ]);
    if (!producerClosed) this.logger.warn({ waitedMs: closeMs }, 'the Kafka producer did not disconnect in time (broker not answering); left behind');
    if (!poolClosed) this.logger.warn({ waitedMs: closeMs }, 'Postgres connections did not close in time; left behind');
    this.uninstallLibraryGuard?.();
    this.logger.info({ hard }, 'relay stopped');
    this.emit('stopped', { hard });
    return { hard };
  }

  private abortWork(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.stopping = true;
    this.signalStop();
    this.signalAbort();
    // Destroying the connection rolls its transaction back on the server: the batch's
    // rows stay unsent and unlocked.
    for (const w of this.workers) {
      for (const client of w.clients) client.release(new Error('relay aborted'));
      w.clients.clear();
    }
  }

  /** What the loops see of this relay (./relayRuntime.ts); after start() set up the pool and producer. */
  private runtime(): RelayRuntime {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the getters read this relay's state as it changes
    const relay = this;
    return {
      options: this.options,
      logger: this.logger,
      instanceId: this.instanceId,
      applicationName: this.applicationName,
      quotedSchema: this.quotedSchema,
      horizon: this.horizon,
      idAudit: this.idAudit,
      membership: this.membership,
      breaker: this.breaker,
      flow: this.flow,
      pool: this.pool as pg.Pool,
      kafka: this.kafkaClient as Kafka,
      producer: this.producer as MessageProducer,
      encoding: this.encoding,
      units: this.exactlyOnce?.units,
      workers: this.workers,
      floors: this.floors,
      lowWater: new LowWaterMark(this.quotedSchema),
      workAvailable: this.workAvailable,
      databaseBack: this.databaseBack,
      breakerOpened: this.breakerOpened,
      get stopping() { return relay.stopping; },
      get aborted() { return relay.aborted; },
      get inlineStatements() { return relay.inlineStatements; },
      preparedStatementsLost: (error) => this.preparedStatementsLost(error),
      emit: (event, payload) => this.emit(event, payload),
      sleep: (ms) => this.sleep(ms),
      sleepOrDatabaseBack: (ms) => this.sleepOrDatabaseBack(ms),
    };
  }

  /**
   * A statement prepared on a connection was missing or another session's in a later
   * transaction: a transaction pooler the start-up probe did not see. With `pooler: 'auto'`
   * the relay stops preparing (the failed batch rolled back and is retried); with `none`
   * every batch fails this way, and the log line says what to change.
   */
  private preparedStatementsLost(error: unknown): void {
    if (this.inlineStatements) return;
    const why = describeError(error);
    if (this.options.pooler === 'auto') {
      this.inlineStatements = true;
      this.logger.warn(
        { err: why },
        'prepared statements vanished between transactions: Postgres connections go through a transaction-pooling proxy; the relay keeps nothing in a session from now on (start it with --pooler transaction to say so)',
      );
    } else {
      this.logger.error({ err: why }, 'prepared statements vanished between transactions (a transaction-pooling proxy?): start the relay with --pooler transaction');
    }
  }

  protected override listenerFailed(event: string, error: unknown): void {
    this.logger.error({ event, err: describeError(error) }, 'a relay event listener threw; ignored');
  }

  /**
   * `work`, unless a stop begins first: then it rejects at once, and `lateValue` disposes
   * of what `work` yields afterwards.
   */
  private unlessStopped<T>(work: Promise<T>, lateValue?: (value: T) => void): Promise<T> {
    let lost = false;
    const stopped = this.stopSignal.then(() => {
      lost = true;
      throw stoppedWhileStarting();
    });
    void work.then(
      (value) => {
        if (lost) lateValue?.(value);
      },
      () => undefined,
    );
    return Promise.race([work, stopped]);
  }

  private sleep(ms: number): Promise<void> {
    return this.stopping ? Promise.resolve() : this.stopRequested.wait(ms);
  }

  /** A retry's backoff, cut short by a stop or by the database answering again. */
  private sleepOrDatabaseBack(ms: number): Promise<void> {
    return this.stopping ? Promise.resolve() : this.databaseBack.wait(ms);
  }
}

/**
 * Create a relay; call `start()` on it. Options are validated here, unless they are
 * already resolved ({@link resolveRelayOptions}): those are used as they are.
 */
export function createRelay(options: RelayOptions | ResolvedRelayOptions, resources?: RelayResources): Relay {
  return new Relay(options, resources);
}

/** What `start()` rejects with when `stop()` came first. */
function stoppedWhileStarting(): OutboxError {
  return new OutboxError('relay stopped while starting', { retriable: false });
}
