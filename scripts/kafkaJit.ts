/**
 * How the JVM of a local Kafka broker compiles (scripts/localKafka.ts), from OUTBOX_KAFKA_JIT:
 *
 * - `tiered` (unset): the JVM's default, C1 then C2 for hot code, what a production broker runs;
 *   the bench keeps it, so that its broker CPU figures compare with earlier runs.
 * - `quick`: C1 only (`-XX:TieredStopAtLevel=1`). The tests and the fault suite start brokers
 *   by the dozen and give each light, short work: there C2's compiling costs more CPU than its
 *   faster code saves (measured by hand, not a committed result: less CPU per start and per
 *   busy test file). .ci/run, `npm test` and `npm run test:faults` set it.
 */
export type KafkaJit = 'tiered' | 'quick';

export function kafkaJit(env: NodeJS.ProcessEnv = process.env): KafkaJit {
  const value = env.OUTBOX_KAFKA_JIT;
  if (value === undefined || value === '' || value === 'tiered') return 'tiered';
  if (value === 'quick') return 'quick';
  throw new Error(`OUTBOX_KAFKA_JIT: ${JSON.stringify(value)} is not one of tiered, quick`);
}

/** The JVM flags of {@link kafkaJit}'s choice. */
export function kafkaJitFlags(env: NodeJS.ProcessEnv = process.env): string[] {
  return kafkaJit(env) === 'quick' ? ['-XX:TieredStopAtLevel=1'] : [];
}
