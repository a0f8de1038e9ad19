import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { Kafka, Producer } from 'kafkajs';
import { quoteIdentifier } from '../shared/identifiers.js';
import { createPool, describeDatabase } from '../shared/database.js';
import { assertMigrated } from '../commands/migrate.js';
import { ConnectionError, OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { COMPRESSION, createKafka, createProducer, groupByTopic } from '../shared/kafka.js';
import { Horizon, openProbeConnection } from './horizon.js';
import { Signal } from './wakeUp.js';
import { backoffDelayMs } from '../shared/backoff.js';
import { TypedEmitter } from '../shared/events.js';
import { claimSql, type ClaimedRow } from './sql/claim.js';
import { markSentSql } from './sql/markSent.js';
import { resolveRelayOptions, type RelayOptions, type ResolvedRelayOptions } from './options.js';
import { Membership, SHARD_COUNT } from './membership.js';
import { publishBatch, PublishError, type DeadLetterPolicy } from './publishBatch.js';
import { CircuitBreaker, type BreakerState } from './breaker.js';
import { deadLetterSql, recordAttemptSql } from './sql/deadLetter.js';

export { SHARD_COUNT };

export { RELAY_SETTINGS, resolveRelayOptions } from './options.js';
export type { RelayOptions, ResolvedRelayOptions } from './options.js';

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

interface Worker {
  index: number;
  /** Shards this worker handles when the relay owns them. */
  shards: number[];
  /** Watermark up to which this worker found nothing more to claim. */
  drainedTo: number;
  lastClaimAtMs: number;
  failures: number;
  client: pg.PoolClient | undefined;
}

/** Idle workers look again this often even when the horizon did not move, to pick up
 *  rows that a failed batch or another transaction's lock left behind. */
const RECHECK_MS = 1_000;
const RETRY_BASE_MS = 100;

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
  private readonly membership: Membership;
  /** Opens when Kafka keeps refusing batches; see {@link CircuitBreaker}. */
  readonly breaker: CircuitBreaker;
  private kafka: Kafka | undefined;
  /** Notified when the horizon moves (and on stop). */
  private readonly workAvailable = new Signal();
  /** Notified only on stop: cuts retry sleeps short without waking them on new work. */
  private readonly stopRequested = new Signal();
  /** Notified when the breaker opens. */
  private readonly breakerOpened = new Signal();
  private pool: pg.Pool | undefined;
  private producer: Producer | undefined;
  private producerConnected = false;
  private workers: Worker[] = [];
  private loops: Promise<void>[] = [];
  private stopping = false;
  private aborted = false;
  private started = false;
  private stopPromise: Promise<{ hard: boolean }> | undefined;

  constructor(options: RelayOptions) {
    super();
    this.options = resolveRelayOptions(options);
    this.quotedSchema = quoteIdentifier(this.options.schema, 'schema');
    this.logger = this.options.logger.child({ component: 'relay', relay: this.instanceId });
    this.horizon = new Horizon(this.quotedSchema, this.options.horizonMaxWaitMs);
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

  /** Highest outbox id the relay may claim up to (see {@link Horizon}). */
  get watermark(): number {
    return this.horizon.watermark;
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
    const o = this.options;
    this.pool = createPool(o.databaseUrl, this.applicationName, o.batchesInFlight + 2, this.logger);
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      await this.pool.end().catch(() => undefined);
      throw new ConnectionError(
        `cannot connect to Postgres at ${describeDatabase(o.databaseUrl)}: ${describeError(error)}`,
        { database: describeDatabase(o.databaseUrl) },
        error,
      );
    }
    try {
      await assertMigrated(client, o.schema);
    } catch (error) {
      client.release();
      await this.pool.end().catch(() => undefined);
      throw error;
    }
    client.release();

    const kafka = o.kafka ?? createKafka({ brokers: o.kafkaBrokers, clientId: o.clientId, logger: this.options.logger });
    this.kafka = kafka;
    this.producer = createProducer(kafka);
    this.producer.on(this.producer.events.DISCONNECT, () => {
      this.producerConnected = false;
    });

    this.workers = Array.from({ length: o.batchesInFlight }, (_, index) => ({
      index,
      shards: shardsOf(index, o.batchesInFlight),
      drainedTo: 0,
      lastClaimAtMs: 0,
      failures: 0,
      client: undefined,
    }));
    this.loops = [this.horizonLoop(), this.membershipLoop(), this.breakerLoop(), ...this.workers.map((w) => this.workerLoop(w))];
    this.logger.info(
      { database: describeDatabase(o.databaseUrl), brokers: o.kafkaBrokers, schema: o.schema, batchSize: o.batchSize, batchesInFlight: o.batchesInFlight },
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
    this.workAvailable.notify();
    this.stopRequested.notify();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), this.options.shutdownTimeoutMs);
    });
    const outcome = await Promise.race([Promise.all(this.loops).then(() => 'drained' as const), timedOut]);
    clearTimeout(timer);
    if (outcome === 'timeout') {
      this.logger.warn({ shutdownTimeoutMs: this.options.shutdownTimeoutMs }, 'shutdown timeout: abandoning batches in flight');
      this.abortWork();
    }
    const hard = this.aborted;
    if (!hard) {
      // Hand the shards over now rather than after the lease TTL.
      await this.membership.leave(this.pool as pg.Pool).catch((error: unknown) => {
        this.logger.warn({ err: describeError(error) }, 'could not release shard leases; they expire by themselves');
      });
    }
    await this.producer?.disconnect().catch(() => undefined);
    await this.pool?.end().catch(() => undefined);
    this.logger.info({ hard }, 'relay stopped');
    this.emit('stopped', { hard });
    return { hard };
  }

  private abortWork(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.stopping = true;
    this.workAvailable.notify();
    this.stopRequested.notify();
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
    while (!this.stopping) {
      let delay = this.options.pollIntervalMs;
      try {
        client ??= await this.connectProbe();
        const forcedBefore = this.horizon.forcedAdvances;
        const resetsBefore = this.horizon.resets;
        let moved = await this.horizon.probe(client);
        // New ids were just paired: a second probe right away usually finds their
        // transactions done and releases them now rather than one interval later.
        if (this.horizon.hasPending) moved = (await this.horizon.probe(client)) || moved;
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
        failures = 0;
      } catch (error) {
        await client?.end().catch(() => undefined);
        client = undefined;
        delay = backoffDelayMs(failures++, RETRY_BASE_MS, this.options.retryMaxDelayMs) + this.options.pollIntervalMs;
        this.logger.warn({ err: describeError(error), retryInMs: delay }, 'horizon probe failed');
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
      await this.sleep(delay);
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
      const admin = (this.kafka as Kafka).admin();
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
      const { watermark, incarnation } = this.horizon;
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
      const due =
        !this.breaker.isOpen && shards.length > 0 && (watermark > worker.drainedTo || Date.now() - worker.lastClaimAtMs >= RECHECK_MS);
      if (!due) {
        await this.workAvailable.wait(RECHECK_MS);
        continue;
      }
      try {
        const count = await this.runBatch(worker, watermark, incarnation, shards);
        worker.failures = 0;
        if (count < this.options.batchSize) worker.drainedTo = watermark;
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
        await this.sleep(retryInMs);
      }
    }
  }

  /** Claim, publish, mark sent, commit. @returns rows published */
  private async runBatch(worker: Worker, watermark: number, incarnation: string | undefined, shards: number[]): Promise<number> {
    const started = Date.now();
    worker.lastClaimAtMs = started;
    const client = await (this.pool as pg.Pool).connect();
    worker.client = client;
    let broken: Error | undefined;
    let failedIds: number[] | undefined;
    // The pool listens for errors only on idle clients. A connection dropped while this
    // one is checked out (during the Kafka send, say) would otherwise be an uncaught
    // 'error' event; the next query on it fails and the batch is retried.
    const onError = (error: Error): void => {
      broken ??= error;
    };
    client.on('error', onError);
    try {
      await client.query('BEGIN');
      const claimStarted = Date.now();
      const { rows } = await client.query<ClaimedRow>(claimSql(this.quotedSchema), [
        watermark,
        shards,
        this.options.batchSize,
        this.instanceId,
        incarnation ?? '-infinity',
      ]);
      if (rows.length === 0) {
        await client.query('COMMIT');
        return 0;
      }
      const claimMs = Date.now() - claimStarted;
      const publishStarted = Date.now();
      let outcome;
      try {
        outcome = await publishBatch(rows, {
          maxMessageBytes: this.options.maxMessageBytes,
          policyOf: (topic) => this.options.deadLetterPolicyByTopic[topic] ?? this.options.deadLetterPolicy,
          send: (batch) => this.publish(batch),
        });
      } catch (error) {
        if (error instanceof PublishError) failedIds = rows.map((r) => r.id);
        throw error;
      }
      const ackedAtMs = Date.now();
      const publishMs = ackedAtMs - publishStarted;
      if (this.aborted) throw new OutboxError('relay aborted before marking the batch sent', { retriable: true });
      const { published, deadLetters } = outcome;
      if (published.length > 0) {
        const marked = await client.query(markSentSql(this.quotedSchema, this.options.onPublish), [published.map((r) => r.id), this.instanceId]);
        if (marked.rowCount !== published.length) throw leaseLost(published.length, marked.rowCount);
      }
      if (deadLetters.length > 0) {
        const { rows: moved } = await client.query<{ moved: number }>(deadLetterSql(this.quotedSchema), [
          deadLetters.map((d) => d.row.id),
          deadLetters.map((d) => d.reason),
          deadLetters.map((d) => d.errorName),
          deadLetters.map((d) => d.policy),
          this.instanceId,
        ]);
        if (moved[0]!.moved !== deadLetters.length) throw leaseLost(deadLetters.length, moved[0]!.moved);
      }
      await client.query('COMMIT');
      const markMs = Date.now() - ackedAtMs;
      this.breaker.success();
      for (const d of deadLetters) {
        this.logger.error(
          { id: d.row.id, topic: d.row.topic, errorName: d.errorName, reason: d.reason, policy: d.policy },
          d.policy === 'park' ? "row moved to the dead letters; its key's later rows wait for it" : 'row moved to the dead letters',
        );
        this.emit('deadLetter', { id: d.row.id, topic: d.row.topic, errorName: d.errorName, reason: d.reason, policy: d.policy });
      }
      if (published.length > 0) {
        const topics: Record<string, number> = {};
        for (const r of published) topics[r.topic] = (topics[r.topic] ?? 0) + 1;
        this.emit('batch', {
          worker: worker.index,
          count: published.length,
          firstId: published[0]!.id,
          lastId: published[published.length - 1]!.id,
          durationMs: Date.now() - started,
          topics,
          createdAtMs: published.map((r) => r.created_at.getTime()),
          ackedAtMs,
          claimMs,
          publishMs,
          markMs,
        });
      }
      // Held rows (behind a key parked just now) count as handled: the claim skips them now.
      return rows.length;
    } catch (error) {
      broken = error as Error;
      await client.query('ROLLBACK').catch(() => undefined);
      if (failedIds && !this.aborted) {
        // Outside the rolled-back transaction: the attempt and its error stay on the rows.
        await (this.pool as pg.Pool)
          .query(recordAttemptSql(this.quotedSchema), [failedIds, describeError(error).slice(0, 2_000)])
          .catch(() => undefined);
      }
      throw error;
    } finally {
      client.off('error', onError);
      if (worker.client === client) {
        worker.client = undefined;
        // A connection that failed mid-transaction is discarded, not reused.
        client.release(broken && isConnectionError(broken) ? broken : undefined);
      }
    }
  }

  private async publish(rows: ClaimedRow[]): Promise<void> {
    const producer = this.producer as Producer;
    if (!this.producerConnected) {
      await producer.connect();
      this.producerConnected = true;
    }
    await producer.sendBatch({
      topicMessages: groupByTopic(rows),
      acks: -1,
      compression: COMPRESSION[this.options.compression],
    });
  }

  private sleep(ms: number): Promise<void> {
    return this.stopping ? Promise.resolve() : this.stopRequested.wait(ms);
  }
}

function leaseLost(expected: number, changed: number | null): OutboxError {
  return new OutboxError('lost the lease of a shard while publishing; rolled back, the new owner publishes these rows', {
    retriable: true,
    context: { expected, changed },
  });
}

function isConnectionError(error: Error): boolean {
  const code = (error as { code?: string }).code;
  // Class 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown,
  // cannot connect now), or a socket error without an SQLSTATE.
  return code === undefined || code.startsWith('08') || code.startsWith('57P');
}

/** Shards handled by worker `index` of `count`: every count-th shard. */
export function shardsOf(index: number, count: number): number[] {
  const shards: number[] = [];
  for (let s = index; s < SHARD_COUNT; s += count) shards.push(s);
  return shards;
}

/** Create a relay; call `start()` on it. Options are validated here. */
export function createRelay(options: RelayOptions): Relay {
  return new Relay(options);
}
