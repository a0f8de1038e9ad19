import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { Kafka } from 'kafkajs';
import { quoteIdentifier } from '../shared/identifiers.js';
import { connectionError, createPool, describeDatabase } from '../shared/database.js';
import { assertRelaySchema } from '../shared/schema.js';
import { OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { createKafka } from '../shared/kafka.js';
import { TypedEmitter } from '../shared/events.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { Horizon, openProbeConnection } from './horizon.js';
import { IdAudit } from './idAudit.js';
import { WakeUp } from './wakeUp.js';
import { settlesWithin } from './deadline.js';
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from './options.js';
import { Membership } from './membership.js';
import { shardsOf } from './shards.js';
import { PublishError, type DeadLetterPolicy } from './publishBatch.js';
import { CircuitBreaker, type BreakerState } from './breaker.js';
import { createMessageProducer, type MessageProducer } from './producer.js';
import { runBatch, type BatchResult, type Worker } from './batch.js';
import { advanceFloor, floorForClaim, newClaimFloor, type ClaimFloor } from './floor.js';

/** Payloads of the relay's events. */
export interface RelayEvents {
  /** A batch was published and marked sent (committed). */
  batch: {
    worker: number;
    count: number;
    firstId: number;
    lastId: number;
    durationMs: number;
    /** Rows published per topic. */
    topics: Record<string, number>;
    /** created_at of each published row (ms since epoch), for commit-to-ack latency. */
    createdAtMs: number[];
    /** When Kafka acknowledged the batch (ms since epoch). */
    ackedAtMs: number;
    /** Time spent claiming, sending to Kafka and marking sent (ms). */
    claimMs: number;
    publishMs: number;
    markMs: number;
  };
  /** A batch failed and was rolled back; it is retried after `retryInMs`. */
  batchError: { worker: number; error: Error; attempt: number; retryInMs: number };
  /** The horizon moved: rows up to `watermark` may be claimed. */
  horizon: { watermark: number; forced: boolean };
  /** Shard ownership changed. `takenOver` shards came from a relay whose lease expired. */
  shards: { owned: number; acquired: number[]; lost: number[]; takenOver: Array<{ shard: number; from: string }>; liveRelays: number };
  /** A row moved to the dead letters (committed). */
  deadLetter: { id: number; topic: string; errorName: string; reason: string; policy: DeadLetterPolicy };
  /** The circuit breaker opened (broker unreachable: claiming paused) or closed again. */
  breaker: { state: BreakerState };
  /** Every worker has stopped; `hard` when the shutdown timeout cut in-flight work short. */
  stopped: { hard: boolean };
}

/** Idle workers look again this often even when the horizon did not move, to pick up
 *  rows that a failed batch or another transaction's lock left behind; after each recheck
 *  that found nothing the wait doubles, up to RECHECK_MAX_MS. Rows skipped as locked sit
 *  below the worker's claim floor until its rescan (floor.ts, every 10 s) in any case,
 *  so a longer idle recheck delays nothing the rescan would not; it saves an idle relay two
 *  transactions a second. */
const RECHECK_MS = 1_000;
const RECHECK_MAX_MS = 5_000;
const RETRY_BASE_MS = 100;
/** How often the horizon probe tries the database again while it does not answer. */
const RECONNECT_PROBE_MS = 250;
/** What closing (producer, pool) may take after a hard stop before it is left behind. */
const CLOSE_AFTER_HARD_STOP_MS = 500;
/**
 * Idle backoff of the horizon probe: after this many probes in a row that found nothing
 * new (no new id, nothing waiting), the interval doubles, up to IDLE_PROBE_MAX_MS (or
 * the poll interval when that is longer), and drops back to the poll interval as soon as
 * a probe finds a new id. At the default 10 ms that is 200 ms of silence before it backs
 * off: traffic of a few rows a second keeps the fast interval (pick-up at 50 rows/s is
 * unchanged); a relay idle for longer probes 10 times a second instead of 100, and the
 * first row after the silence waits up to 100 ms instead of 10. Measured idle (relay
 * process + its backends, % of a core, load average 7): 2.2 at a 50 ms ceiling, 1.6 at
 * 100, 1.0 at 200; each probe costs the relay process far more than its backend.
 */
const IDLE_PROBES_BEFORE_BACKOFF = 20;
const IDLE_PROBE_MAX_MS = 100;

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
  private kafkaClient: Kafka | undefined;
  /** Notified when the horizon moves (and on stop). */
  private readonly workAvailable = new WakeUp();
  /** Notified only on stop: cuts retry sleeps short without waking them on new work. */
  private readonly stopRequested = new WakeUp();
  /** Notified when the horizon probe reaches the database again after failing (and on stop). */
  private readonly databaseBack = new WakeUp();
  /** Notified when the breaker opens. */
  private readonly breakerOpened = new WakeUp();
  private pool: pg.Pool | undefined;
  private producer: MessageProducer | undefined;
  private workers: Worker[] = [];
  /** Where each worker's next claim starts (floor.ts). */
  private readonly floors = new Map<Worker, ClaimFloor>();
  private loops: Promise<void>[] = [];
  private stopping = false;
  private aborted = false;
  private started = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;
  private starting: Promise<void> | undefined;
  /** Resolves when a stop begins: what a start in progress races against. */
  private readonly stopSignal: Promise<void>;
  private signalStop!: () => void;
  /** Resolves on abort(), or when the shutdown timeout cuts a stop short. */
  private readonly abortSignal: Promise<void>;
  private signalAbort!: () => void;

  constructor(options: RelayOptions | ResolvedRelayOptions) {
    super();
    this.stopSignal = new Promise<void>((resolve) => (this.signalStop = resolve));
    this.abortSignal = new Promise<void>((resolve) => (this.signalAbort = resolve));
    this.options = resolveRelayOptions(options);
    this.quotedSchema = quoteIdentifier(this.options.schema, 'schema');
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
    );
  }

  /** Prefix of the application_name of every connection: how a successor finds them. */
  get applicationName(): string {
    return `${this.options.clientId}:${this.instanceId}`;
  }

  /** Shards this relay currently owns. */
  get ownedShards(): number[] {
    return [...this.membership.owned].sort((a, b) => a - b);
  }

  /** Highest outbox id the relay may claim up to (see the visibility horizon in horizon.ts). */
  get watermark(): number {
    return this.horizon.watermark;
  }

  /** The kafkajs client the relay publishes with (after `start()`), for health checks. */
  get kafka(): Kafka | undefined {
    return this.kafkaClient;
  }

  /**
   * Check the database and schema, then start relaying. Resolves once work has begun.
   *
   * @throws ConnectionError when Postgres cannot be reached; SchemaError when the schema
   *   is not migrated. Kafka being down is not fatal: batches retry until it is back.
   */
  async start(): Promise<void> {
    if (this.started) throw new OutboxError('relay already started', { retriable: false });
    this.started = true;
    this.starting = this.doStart();
    return this.starting;
  }

  private async doStart(): Promise<void> {
    if (this.stopping) throw stoppedWhileStarting();
    const o = this.options;
    const pool = createPool(o.databaseUrl, this.applicationName, o.batchesInFlight + 2, this.logger);
    this.pool = pool;
    try {
      // A Postgres that accepts and never answers holds connect() until its timeout: a
      // stop meanwhile must not wait for it.
      const client = await this.unlessStopped(pool.connect(), (late) => late.release(true)).catch((error: unknown) => {
        throw this.stopping ? error : connectionError(o.databaseUrl, error);
      });
      try {
        await this.unlessStopped(assertRelaySchema(client, o.schema));
      } finally {
        // Destroyed rather than returned when the stop cut the check short: its query may still run.
        client.release(this.stopping ? true : undefined);
      }
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
    this.producer = createMessageProducer(kafka, o);

    this.workers = Array.from({ length: o.batchesInFlight }, (_, index) => ({
      index,
      shards: shardsOf(index, o.batchesInFlight),
      drainedTo: 0,
      lastClaimAtMs: 0,
      emptyRechecks: 0,
      failures: 0,
      client: undefined,
      claimGeneration: undefined,
      claimedRows: [],
    }));
    for (const w of this.workers) this.floors.set(w, newClaimFloor());
    this.loops = [this.horizonLoop(), this.membershipLoop(), this.breakerLoop(), ...this.workers.map((w) => this.workerLoop(w))];
    this.logger.info(
      {
        database: describeDatabase(o.databaseUrl),
        brokers: o.kafkaBrokers,
        schema: o.schema,
        batchSize: o.batchSize,
        batchesInFlight: o.batchesInFlight,
        producer: this.producer.adapter,
      },
      'relay started',
    );
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
    this.workAvailable.notify();
    this.stopRequested.notify();
    this.databaseBack.notify();
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
    // Giving the leases back and disconnecting must not outlast the stop either: a
    // database or broker that accepts and never answers would hold them for its own
    // timeout (30 s: kafkajs' request timeout). After that they are left behind.
    const budgetMs = (): number => (hard ? CLOSE_AFTER_HARD_STOP_MS : Math.max(CLOSE_AFTER_HARD_STOP_MS, deadline - Date.now()));
    if (!hard && this.pool) {
      // Hand the shards over now rather than after the lease TTL.
      const leave = this.membership.leave(this.pool).catch((error: unknown) => {
        this.logger.warn({ err: describeError(error) }, 'could not release shard leases; they expire by themselves');
      });
      if (!(await settlesWithin(leave, budgetMs()))) this.logger.warn('giving the shard leases back took too long; they expire by themselves');
    }
    const closeMs = budgetMs();
    const [producerClosed, poolClosed] = await Promise.all([
      settlesWithin(this.producer?.disconnect() ?? Promise.resolve(), closeMs),
      settlesWithin(this.pool?.end() ?? Promise.resolve(), closeMs),
    ]);
    if (!producerClosed) this.logger.warn({ waitedMs: closeMs }, 'the Kafka producer did not disconnect in time (broker not answering); left behind');
    if (!poolClosed) this.logger.warn({ waitedMs: closeMs }, 'Postgres connections did not close in time; left behind');
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
    this.workAvailable.notify();
    this.stopRequested.notify();
    this.databaseBack.notify();
    // Destroying the connection rolls its transaction back on the server: the batch's
    // rows stay unsent and unlocked.
    for (const w of this.workers) {
      w.client?.release(new Error('relay aborted'));
      w.client = undefined;
    }
  }

  private async horizonLoop(): Promise<void> {
    let failures = 0;
    let client: pg.Client | undefined;
    let idleProbes = 0;
    while (!this.stopping) {
      const poll = this.options.pollIntervalMs;
      let delay =
        idleProbes < IDLE_PROBES_BEFORE_BACKOFF
          ? poll
          : Math.max(poll, Math.min(IDLE_PROBE_MAX_MS, poll * 2 ** Math.min(10, idleProbes - IDLE_PROBES_BEFORE_BACKOFF + 1)));
      try {
        client ??= await this.connectProbe();
        const forcedBefore = this.horizon.forcedAdvances;
        const resetsBefore = this.horizon.resets;
        const pairedBefore = this.horizon.pairedUpTo;
        let moved = await this.horizon.probe(client);
        // New ids were just paired: a second probe right away usually finds their
        // transactions done and releases them now rather than one interval later.
        if (this.horizon.hasPending) moved = (await this.horizon.probe(client)) || moved;
        if (failures > 0) {
          // The database answers again: workers and lease renewal waiting out a backoff
          // from the outage try now instead.
          this.logger.info({ failedProbes: failures }, 'database answers again: resuming');
          this.databaseBack.notify();
          this.workAvailable.notify();
        }
        const above = await this.idAudit.check(client);
        if (above) {
          this.logger.warn(
            { ...above, schema: this.options.schema },
            'unsent rows have ids above the outbox sequence (id set by hand?): they are not claimed until the sequence passes them, and then go out after rows enqueued later; let the sequence pick ids',
          );
        }
        if (this.horizon.resets > resetsBefore) {
          this.logger.warn({ incarnation: this.horizon.incarnation }, 'Postgres restarted or the outbox sequence went backwards: horizon starts over');
          for (const w of this.workers) w.drainedTo = 0;
        }
        if (moved) {
          const forced = this.horizon.forcedAdvances > forcedBefore;
          if (forced) {
            this.logger.warn(
              { watermark: this.horizon.watermark, horizonMaxWaitMs: this.options.horizonMaxWaitMs },
              'horizon released rows still waiting behind a long-running transaction',
            );
          }
          this.emit('horizon', { watermark: this.horizon.watermark, forced });
          this.workAvailable.notify();
        }
        // Something may change soon only when a new id appeared or a pair still waits.
        const quiet = !moved && !this.horizon.hasPending && this.horizon.pairedUpTo === pairedBefore;
        idleProbes = quiet ? idleProbes + 1 : 0;
        if (!quiet) delay = poll;
        failures = 0;
      } catch (error) {
        await client?.end().catch(() => undefined);
        client = undefined;
        // Not the retry backoff: a probe is one cheap connection attempt, and the relay
        // publishes nothing until one succeeds, so a database that comes back is seen
        // within this interval rather than after a backoff grown during the outage.
        delay = RECONNECT_PROBE_MS;
        failures++;
        // Warn when the database goes away; the attempts after that are debug noise.
        this.logger[failures === 1 ? 'warn' : 'debug']({ err: describeError(error), attempt: failures, retryInMs: delay }, 'horizon probe failed; retrying');
      }
      await this.sleep(delay);
    }
    await client?.end().catch(() => undefined);
  }

  private connectProbe(): Promise<pg.Client> {
    return openProbeConnection(this.options.databaseUrl, `${this.applicationName}:horizon`);
  }

  private async membershipLoop(): Promise<void> {
    const intervalMs = Math.max(100, Math.floor(this.options.leaseTtlMs / 3));
    let failures = 0;
    let lastSuccessMs = Date.now();
    while (!this.stopping) {
      let delay = intervalMs;
      try {
        const client = await (this.pool as pg.Pool).connect();
        let broken: Error | undefined;
        // See runBatch: a connection dropped between two queries emits 'error'.
        const onError = (error: Error): void => {
          broken ??= error;
        };
        client.on('error', onError);
        let change;
        try {
          change = await this.membership.tick(client);
        } catch (error) {
          broken ??= error as Error;
          throw error;
        } finally {
          client.off('error', onError);
          client.release(broken);
        }
        failures = 0;
        lastSuccessMs = Date.now();
        if (change.acquired.length > 0 || change.lost.length > 0) {
          // New shards may hold rows below the current watermark: look again.
          for (const w of this.workers) w.drainedTo = 0;
          this.logger.info(
            { owned: this.membership.owned.size, acquired: change.acquired.length, lost: change.lost.length, liveRelays: change.liveRelays },
            'shard ownership changed',
          );
          this.emit('shards', { owned: this.membership.owned.size, ...change });
          this.workAvailable.notify();
        }
      } catch (error) {
        if (Date.now() - lastSuccessMs > this.options.leaseTtlMs) this.membership.dropAll();
        delay = Math.min(intervalMs, backoffDelayMs(failures++, RETRY_BASE_MS, this.options.retryMaxDelayMs) + RETRY_BASE_MS);
        this.logger.warn({ err: describeError(error), retryInMs: delay }, 'shard lease renewal failed');
      }
      await this.sleepOrDatabaseBack(delay);
    }
  }

  /** While the breaker is open: probe the broker with backoff; close it when it answers. */
  private async breakerLoop(): Promise<void> {
    let probes = 0;
    while (!this.stopping) {
      if (!this.breaker.isOpen) {
        probes = 0;
        await this.breakerOpened.wait(RECHECK_MS);
        continue;
      }
      await this.sleep(backoffDelayMs(probes++, 250, Math.min(this.options.retryMaxDelayMs, 5_000)) + 250);
      if (this.stopping) break;
      const admin = (this.kafkaClient as Kafka).admin();
      try {
        await admin.connect();
        await admin.describeCluster();
        this.breaker.probeSucceeded();
        this.logger.info({ probes }, 'Kafka answers again: circuit breaker closed, claiming resumes');
        this.emit('breaker', { state: 'closed' });
        this.workAvailable.notify();
      } catch (error) {
        this.logger.debug({ err: describeError(error), probes }, 'Kafka still unreachable');
      } finally {
        await admin.disconnect().catch(() => undefined);
      }
    }
  }

  private async workerLoop(worker: Worker): Promise<void> {
    while (!this.stopping) {
      const { watermark, incarnation, settled, resets } = this.horizon;
      const shards = worker.shards.filter((s) => this.membership.owned.has(s));
      const unwanted = shards.filter((s) => !this.membership.wanted.has(s));
      if (unwanted.length > 0) {
        // Between two batches of this worker: none of these shards has a batch in flight.
        try {
          await this.membership.release(this.pool as pg.Pool, unwanted);
          this.logger.info({ worker: worker.index, released: unwanted.length }, 'released shards to rebalance');
        } catch (error) {
          this.logger.warn({ err: describeError(error) }, 'could not release shards; retrying');
          await this.sleep(RETRY_BASE_MS * 10);
        }
        continue;
      }
      const recheckMs = Math.min(RECHECK_MAX_MS, RECHECK_MS * 2 ** Math.min(8, worker.emptyRechecks));
      const moved = watermark > worker.drainedTo;
      const sinceClaimMs = Date.now() - worker.lastClaimAtMs;
      const due = !this.breaker.isOpen && shards.length > 0 && (moved || sinceClaimMs >= recheckMs);
      if (!due) {
        await this.workAvailable.wait(Math.max(1, recheckMs - sinceClaimMs));
        continue;
      }
      let result: BatchResult;
      const floor = this.floors.get(worker) as ClaimFloor;
      try {
        result = await runBatch(this.batchContext, worker, watermark, incarnation, shards, floorForClaim(floor, shards, resets, Date.now()));
      } catch (error) {
        if (this.aborted) break;
        if (error instanceof PublishError && this.breaker.failure()) {
          this.logger.warn(
            { err: describeError(error), failuresToOpen: this.options.breakerFailures },
            'Kafka keeps refusing batches: circuit breaker open, claiming paused until a probe reaches it',
          );
          this.emit('breaker', { state: 'open' });
          this.breakerOpened.notify();
        }
        const retryInMs = backoffDelayMs(worker.failures, RETRY_BASE_MS, this.options.retryMaxDelayMs);
        worker.failures++;
        this.logger.warn(
          { worker: worker.index, attempt: worker.failures, retryInMs, err: describeError(error) },
          'batch failed; rolled back, will retry',
        );
        this.emit('batchError', { worker: worker.index, error: error as Error, attempt: worker.failures, retryInMs });
        await this.sleepOrDatabaseBack(retryInMs);
        continue;
      }
      worker.failures = 0;
      advanceFloor(floor, {
        shards,
        horizonResets: resets,
        generation: worker.claimGeneration,
        watermark,
        settled,
        batchSize: this.options.batchSize,
        claimed: worker.claimedRows,
        done: new Set([...result.published.map((r) => r.id), ...result.deadLetters.map((d) => d.row.id)]),
        parkedKeys: new Set(result.deadLetters.filter((d) => d.policy === 'park').map((d) => `${d.row.topic}\u0000${d.row.key}`)),
      });
      if (result.claimed < this.options.batchSize) worker.drainedTo = watermark;
      // A recheck (the horizon had not moved) that found nothing: wait longer for the next.
      worker.emptyRechecks = result.claimed === 0 && !moved ? worker.emptyRechecks + 1 : 0;
      if (result.claimed > 0) this.batchCommitted(worker, result);
    }
  }

  /** What runBatch needs from this relay. */
  private get batchContext(): Parameters<typeof runBatch>[0] {
    return {
      pool: this.pool as pg.Pool,
      quotedSchema: this.quotedSchema,
      instanceId: this.instanceId,
      options: this.options,
      send: (rows) => (this.producer as MessageProducer).send(rows),
      aborted: () => this.aborted,
    };
  }

  /** After COMMIT, outside the batch's error handling: listeners cannot undo a batch. */
  private batchCommitted(worker: Worker, result: BatchResult): void {
    this.breaker.success();
    const { published, deadLetters } = result;
    if (result.unsent.length > 0) {
      this.logger.warn(
        { worker: worker.index, unsent: result.unsent.length, firstId: result.unsent[0]!.id, err: describeError(result.unsentError) },
        'rows left unsent for now (their partition or topic is not available); the rest of the batch committed, a later batch retries them',
      );
    }
    for (const d of deadLetters) {
      this.logger.error(
        { id: d.row.id, topic: d.row.topic, errorName: d.errorName, reason: d.reason, policy: d.policy },
        d.policy === 'park' ? "row moved to the dead letters; its key's later rows wait for it" : 'row moved to the dead letters',
      );
      this.emit('deadLetter', { id: d.row.id, topic: d.row.topic, errorName: d.errorName, reason: d.reason, policy: d.policy });
    }
    if (published.length === 0) return;
    const topics: Record<string, number> = {};
    for (const r of published) topics[r.topic] = (topics[r.topic] ?? 0) + 1;
    this.emit('batch', {
      worker: worker.index,
      count: published.length,
      firstId: published[0]!.id,
      lastId: published[published.length - 1]!.id,
      durationMs: Date.now() - result.startedAtMs,
      topics,
      createdAtMs: published.map((r) => r.created_at.getTime()),
      ackedAtMs: result.ackedAtMs,
      claimMs: result.claimMs,
      publishMs: result.publishMs,
      markMs: result.markMs,
    });
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
export function createRelay(options: RelayOptions | ResolvedRelayOptions): Relay {
  return new Relay(options);
}

/** What `start()` rejects with when `stop()` came first. */
function stoppedWhileStarting(): OutboxError {
  return new OutboxError('relay stopped while starting', { retriable: false });
}
