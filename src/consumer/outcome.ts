import type { DeadLetterReason } from './deadLetterTopic.js';

// What a transaction of the consumer comes to: how many leading messages committed, the
// failure that stopped it, the afterCommit hooks to run. The consumer's lifecycle
// (consumer.ts) acts on it; report.ts counts and announces it.

/** Why a message could not be handled. */
export interface Failure {
  /** Index in the chunk. */
  index: number;
  error: unknown;
  /** Set when the failure is permanent by nature, whatever the classifier says. */
  reason?: DeadLetterReason;
  attempt: number;
}

/** An `afterCommit` hook of a message whose transaction committed, to run now. */
export interface CommittedHook {
  offset: string;
  idempotencyKey: string | undefined;
  fn: () => unknown;
}

/** What a transaction did: how many leading messages committed, the failure, the hooks to run. */
export interface TransactOutcome {
  committed: number;
  failure: Failure | undefined;
  /** The afterCommit hooks of the committed messages, in offset order. */
  hooks: CommittedHook[];
  /** Per committed message (the first `committed` of the group): duplicate, stale. */
  outcomes: Array<{ duplicate: boolean; stale: boolean }>;
}

/** What a run of a handler reported for one message, while its transaction is open. */
export interface MessageOutcome {
  duplicate: boolean;
  stale: boolean;
  /** Its afterCommit hooks, dropped with it when its run is rolled back. */
  hooks: Array<() => unknown>;
  /** Its handler returned: no more hooks. */
  settled: boolean;
}

/** Nothing committed: the first message failed. */
export function failedAtFirst(failure: Failure): TransactOutcome {
  return { committed: 0, failure, hooks: [], outcomes: [] };
}
