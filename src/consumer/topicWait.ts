import type { Kafka } from 'kafkajs';
import { OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';

// A consumer started before its topic exists (deployed before the relay's first publish
// created it) waits for it, as a Kafka consumer waits for its subscription's topics to
// appear, instead of failing at once with "This server does not host this
// topic-partition". The wait is bounded by missingTopicTimeoutMs.

/** Topics still missing when missingTopicTimeoutMs ran out. */
export class MissingTopicError extends OutboxError {
  constructor(missing: string[], timeoutMs: number) {
    super(
      `topic${missing.length > 1 ? 's' : ''} ${missing.map((t) => JSON.stringify(t)).join(', ')} ${missing.length > 1 ? 'do' : 'does'} not exist ` +
        `(waited ${timeoutMs} ms, missingTopicTimeoutMs): create ${missing.length > 1 ? 'them' : 'it'}, let the relay's first publish create ${missing.length > 1 ? 'them' : 'it'} ` +
        '(broker auto.create.topics.enable), or raise missingTopicTimeoutMs',
      { retriable: true, context: { topics: missing, missingTopicTimeoutMs: timeoutMs } },
    );
  }
}

/** Between two looks at the broker's topics: doubling from this, up to the maximum. */
const FIRST_LOOK_MS = 100;
const MAX_LOOK_MS = 2_000;

/**
 * Resolve once every topic of `topics` exists on the broker.
 * @param onWait called before each wait, with the topics still missing
 * @throws MissingTopicError after `timeoutMs`; an Error when `stopped()` turns true
 */
export async function waitForTopics(
  kafka: Kafka,
  topics: string[],
  o: { timeoutMs: number; logger: Logger; onWait: (missing: string[], waitedMs: number) => void; stopped: () => boolean },
): Promise<void> {
  const admin = kafka.admin();
  const started = Date.now();
  await admin.connect();
  try {
    for (let look = 0; ; look++) {
      const existing = new Set(await admin.listTopics());
      const missing = topics.filter((t) => !existing.has(t));
      if (missing.length === 0) {
        if (look > 0) o.logger.info({ topics, waitedMs: Date.now() - started }, 'topics exist now; starting');
        return;
      }
      const waitedMs = Date.now() - started;
      if (waitedMs >= o.timeoutMs) throw new MissingTopicError(missing, o.timeoutMs);
      if (o.stopped()) throw new OutboxError('consumer stopped while waiting for its topics to exist', { retriable: false, context: { topics: missing } });
      const delayMs = Math.min(MAX_LOOK_MS, FIRST_LOOK_MS * 2 ** look, o.timeoutMs - waitedMs);
      if (look === 0) o.logger.warn({ missing, missingTopicTimeoutMs: o.timeoutMs }, 'topic does not exist yet; waiting for it');
      o.onWait(missing, waitedMs);
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
  } finally {
    await admin.disconnect().catch((error: unknown) => o.logger.warn({ err: describeError(error) }, 'admin disconnect failed'));
  }
}
