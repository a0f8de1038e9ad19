import { traceSkipped } from '../shared/tracing.js';
import type { Prepared } from './prepare.js';
import type { TransactOutcome } from './outcome.js';
import type { ConsumerEvents, ConsumerStats } from './types.js';

/** Emits one of the consumer's events (the Consumer's own emit). */
export type EmitConsumerEvent = <K extends keyof ConsumerEvents & string>(event: K, payload: ConsumerEvents[K]) => void;

/**
 * Count and announce what a transaction committed (`duplicate`, `missingKey`, `stale`,
 * `committed`). Called by the consumer with the outcome decided, outside the
 * transaction's error handling: a listener can never turn a commit into a failure.
 */
export function reportCommitted<V>(
  groupId: string,
  counters: ConsumerStats,
  emit: EmitConsumerEvent,
  topic: string,
  partition: number,
  prepared: Prepared<V>[],
  result: TransactOutcome,
): void {
  const { committed } = result;
  let processed = 0;
  let duplicates = 0;
  for (let i = 0; i < committed; i++) {
    const outcome = result.outcomes[i] as { duplicate: boolean; stale: boolean };
    const p = prepared[i] as Prepared<V>;
    const { offset, idempotencyKey } = p.message;
    if (outcome.duplicate) {
      duplicates++;
      counters.duplicates++;
      emit('duplicate', { topic, partition, offset, idempotencyKey: idempotencyKey as string });
      void traceSkipped(p.message, groupId, p.attempt, 'duplicate', { 'outbox.consumer.idempotency_key': idempotencyKey as string });
      continue;
    }
    processed++;
    counters.processed++;
    if (p.missingKey) {
      counters.missingKey++;
      emit('missingKey', { topic, partition, offset, outcome: 'process-without-dedup' });
    }
    if (outcome.stale) {
      counters.stale++;
      emit('stale', { topic, partition, offset, idempotencyKey });
    }
  }
  if (committed > 0) {
    emit('committed', {
      topic,
      partition,
      firstOffset: (prepared[0] as Prepared<V>).raw.offset,
      lastOffset: (prepared[committed - 1] as Prepared<V>).raw.offset,
      count: committed,
      processed,
      duplicates,
    });
  }
}
