import { producer } from '../../src/relay/options.js';
import { readSetting } from '../../src/shared/settings.js';

/**
 * The producer adapter the relay's Kafka tests run on: OUTBOX_TEST_PRODUCER, unset the
 * product's own default (platformatic), so a plain test run tests what users run. The
 * same tests run once per adapter (CI: platformatic on Node 24, kafkajs on Node 22,
 * .ci/run): a matrix, not copies. Tests pass it to createRelay
 * (`producer: TEST_PRODUCER`) and, for relay processes, as OUTBOX_PRODUCER.
 */
const ADAPTERS = ['kafkajs', 'platformatic'] as const;
export type TestProducer = (typeof ADAPTERS)[number];

/** The adapter the relay uses when nothing names one (RELAY_SETTINGS' `producer` default). */
export const PRODUCT_DEFAULT_PRODUCER: TestProducer = readSetting(producer, undefined, {}) ?? 'platformatic';

/** The adapter named by `raw` (unset or empty: the product's default). @throws Error for any other name */
export function testProducerFrom(raw: string | undefined): TestProducer {
  const value = (raw ?? '').trim();
  if (value === '') return PRODUCT_DEFAULT_PRODUCER;
  if ((ADAPTERS as readonly string[]).includes(value)) return value as TestProducer;
  throw new Error(`OUTBOX_TEST_PRODUCER=${JSON.stringify(raw)} is not one of ${ADAPTERS.join(', ')}`);
}

export const TEST_PRODUCER: TestProducer = testProducerFrom(process.env.OUTBOX_TEST_PRODUCER);

/** Environment of a relay process spawned by a test: the adapter under test. */
export const TEST_PRODUCER_ENV = { OUTBOX_PRODUCER: TEST_PRODUCER } as const;
