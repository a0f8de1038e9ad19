/**
 * The producer adapter the relay's Kafka tests run on: OUTBOX_TEST_PRODUCER, kafkajs by
 * default. The same tests run once per adapter (CI: kafkajs on Node 20, platformatic on
 * Node 24, .ci/run): a matrix, not copies. Tests pass it to createRelay
 * (`producer: TEST_PRODUCER`) and, for relay processes, as OUTBOX_PRODUCER.
 */
const ADAPTERS = ['kafkajs', 'platformatic'] as const;
export type TestProducer = (typeof ADAPTERS)[number];

/** The adapter named by `raw` (unset or empty: kafkajs). @throws Error for any other name */
export function testProducerFrom(raw: string | undefined): TestProducer {
  const value = (raw ?? '').trim();
  if (value === '') return 'kafkajs';
  if ((ADAPTERS as readonly string[]).includes(value)) return value as TestProducer;
  throw new Error(`OUTBOX_TEST_PRODUCER=${JSON.stringify(raw)} is not one of ${ADAPTERS.join(', ')}`);
}

export const TEST_PRODUCER: TestProducer = testProducerFrom(process.env.OUTBOX_TEST_PRODUCER);

/** Environment of a relay process spawned by a test: the adapter under test. */
export const TEST_PRODUCER_ENV = { OUTBOX_PRODUCER: TEST_PRODUCER } as const;
