import type pg from 'pg';
import type { Kafka } from 'kafkajs';
import type { Logger } from '../shared/logger.js';
import type { Horizon } from './horizon.js';
import type { LowWaterMark } from './lowWater.js';
import type { IdAudit } from './idAudit.js';
import type { Membership } from './membership.js';
import type { CircuitBreaker } from './breaker.js';
import type { EncodingStep } from './encodingStep.js';
import type { FlowRecorder } from './flowRecorder.js';
import type { MessageProducer } from './messageProducer.js';
import type { ResolvedRelayOptions } from './options.js';
import type { Worker } from './batch.js';
import type { ClaimFloor } from './floor.js';
import type { WakeUp } from './wakeUp.js';
import type { RelayEvents } from './relayEvents.js';
import type { ExactlyOnceUnit } from './exactlyOnceUnit.js';

// What the relay's loops (horizonLoop, membershipLoop, breakerLoop, partitionLoop, workerLoop) share of a
// running relay: its settings and state, how they wake each other, and its events. The
// Relay class (./relay.ts) owns all of it and hands this view to each loop at start.

/** First retry delay of a failed batch or lease round; doubles up to retryMaxDelayMs. */
export const RETRY_BASE_MS = 100;

/** A running relay as its loops see it. */
export interface RelayRuntime {
  readonly options: ResolvedRelayOptions;
  readonly logger: Logger;
  readonly instanceId: string;
  /** Prefix of the application_name of every connection (see Relay.applicationName). */
  readonly applicationName: string;
  readonly quotedSchema: string;
  readonly horizon: Horizon;
  readonly idAudit: IdAudit;
  readonly membership: Membership;
  readonly breaker: CircuitBreaker;
  /** Rows published and dead-lettered per minute, written by the lease loop (flowRecorder.ts). */
  readonly flow: FlowRecorder;
  readonly pool: pg.Pool;
  readonly kafka: Kafka;
  readonly producer: MessageProducer;
  /** Schema-registry encodings, when configured (./encodingStep.ts). */
  readonly encoding: EncodingStep | undefined;
  /** Exactly-once mode: one transactional producer per unit, worker i publishing unit i's (./units.ts); else undefined. */
  readonly units: readonly ExactlyOnceUnit[] | undefined;
  readonly workers: readonly Worker[];
  /** Where each worker's next claim starts (floor.ts). */
  readonly floors: Map<Worker, ClaimFloor>;
  /** Where the floors start over (lowWater.ts). */
  readonly lowWater: LowWaterMark;
  /** Notified when the horizon moves, shards change, the breaker closes (and on stop). */
  readonly workAvailable: WakeUp;
  /** Notified when the horizon probe reaches the database again after failing (and on stop). */
  readonly databaseBack: WakeUp;
  /** Notified when the breaker opens. */
  readonly breakerOpened: WakeUp;
  /** True once a stop began. */
  readonly stopping: boolean;
  /** True once in-flight batches are abandoned (abort, or the shutdown timeout). */
  readonly aborted: boolean;
  /** True when statements go in full, none prepared (a transaction-pooling proxy: poolerProbe.ts). */
  readonly inlineStatements: boolean;
  /** A batch or probe failed because its prepared statements vanished (poolerProbe.ts, preparedStatementsLost). */
  preparedStatementsLost(error: unknown): void;
  emit<K extends keyof RelayEvents & string>(event: K, payload: RelayEvents[K]): void;
  /** Sleep, cut short by a stop. */
  sleep(ms: number): Promise<void>;
  /** A retry's backoff, cut short by a stop or by the database answering again. */
  sleepOrDatabaseBack(ms: number): Promise<void>;
}
