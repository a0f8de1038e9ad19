import type { DeadLetterPolicy } from './options.js';
import type { BreakerState } from './breaker.js';
import type { ClientLibrary } from '../shared/libraryGuard.js';

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
    /** created_at of each published row (ms since epoch) a Kafka timestamp can hold, for commit-to-ack latency. */
    createdAtMs: number[];
    /** When Kafka acknowledged the batch, in exactly-once mode when its transaction committed (ms since epoch). */
    ackedAtMs: number;
    /** Time spent claiming, sending to Kafka and marking sent (ms). */
    claimMs: number;
    publishMs: number;
    markMs: number;
    /** Claimed while the worker's previous batch was being published (a backlog: workerLoop.ts). */
    claimedAhead: boolean;
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
  /**
   * A client library threw from one of its own callbacks (a bug of the library), outside
   * any call's promise: contained, the relay goes on; `failedCalls` of the relay's calls
   * in flight into it failed as transient and are retried (../shared/libraryGuard.ts).
   */
  libraryError: { library: ClientLibrary; error: Error; failedCalls: number };
  /** Every worker has stopped; `hard` when the shutdown timeout cut in-flight work short. */
  stopped: { hard: boolean };
}
