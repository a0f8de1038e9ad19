/**
 * What the relay's metrics, readiness and metrics server read from a relay: a few of its
 * options, the shards it owns and some of its events. A `Relay` is one; the metrics layer
 * needs nothing else of it (and the relay knows nothing of metrics).
 */
import type { RelayEvents } from '../relay/relay.js';
import type { ResolvedRelayOptions } from '../relay/options.js';

/** The relay events the metrics listen to. */
export type RelayStatusEvent = 'batch' | 'batchError' | 'horizon' | 'shards' | 'breaker' | 'deadLetter' | 'libraryError' | 'stopped';

/** A relay as the metrics see it (a `Relay` is one). */
export interface RelayStatusSource {
  /** Where the sampler and the readiness probes connect, and how they name their clients. */
  readonly options: Pick<ResolvedRelayOptions, 'schema' | 'databaseUrl' | 'clientId' | 'kafka' | 'kafkaBrokers' | 'kafkaSecurity'> &
    Partial<Pick<ResolvedRelayOptions, 'horizonMaxWaitMs'>>;
  /** Shards the relay owns now. */
  readonly ownedShards: readonly number[];
  /** How long the newest rows have waited behind an open outbox writer, in ms (a source without a horizon: absent, read as 0). */
  readonly horizonWaitMs?: number;
  /**
   * Highest outbox id at or below which every row is committed or rolled back; the backlog
   * sampler never starts its walk above it (a source without a horizon: absent, and every
   * sample walks from the lowest id).
   */
  readonly settledId?: number;
  on<K extends RelayStatusEvent>(event: K, listener: (payload: RelayEvents[K]) => void): unknown;
  off<K extends RelayStatusEvent>(event: K, listener: (payload: RelayEvents[K]) => void): unknown;
}
