import { OutboxError } from '../shared/errors.js';
import { classifyPublishError, type ClassifiedPublishError } from './publishErrors.js';
import { validateRow } from './validation.js';
import { stampAtSend, toMessage, type RelayMessage } from './message.js';
import type { SendResult } from './messageProducer.js';
import type { DeadLetterPolicy } from './options.js';
import { TopicMissingError } from './topicMetadata.js';
import { startPublishSpans, traceRejectedRow, type PublishSpans } from '../shared/tracing.js';
import type { ClaimedRow } from './sql/claim.js';
import { RegistryWaitError, type EncodeResult } from './encodingStep.js';

export type { DeadLetterPolicy } from './options.js';

export interface DeadLetterPlan {
  row: ClaimedRow;
  errorName: string;
  reason: string;
  policy: DeadLetterPolicy;
}

export interface BatchOutcome {
  /** Acknowledged by Kafka: mark sent. In id order. */
  published: ClaimedRow[];
  /** Never publishable as they are: move to the dead letters. */
  deadLetters: DeadLetterPlan[];
  /** Later rows of a key parked in this batch: left unsent, in order, behind the parked row. */
  held: ClaimedRow[];
  /**
   * Not acknowledged, for a reason that may pass (their partition refused them for now,
   * or their topic is missing since less than `missingTopicTimeoutMs`): left unsent, for a
   * later batch. A key's rows are all here or none of them is, so nothing later of a key
   * is marked sent while an earlier row of it waits.
   */
  unsent: ClaimedRow[];
  /** Why the first of `unsent` was not sent. */
  unsentError: PublishError | TopicWaitError | RegistryWaitError | undefined;
}

/** Kafka refused a batch for a reason that may pass (broker down, leader change, timeout). */
export class PublishError extends OutboxError {
  readonly kafkaError: ClassifiedPublishError;

  constructor(classified: ClassifiedPublishError, cause: unknown, rows: number) {
    super(`Kafka did not acknowledge the batch: ${classified.name}: ${classified.message}`, {
      retriable: true,
      context: { kafkaError: classified.name, rows },
      cause,
    });
    this.kafkaError = classified;
  }
}

/**
 * Rows wait for a topic Kafka does not have (yet), for at most `missingTopicTimeoutMs`.
 * Not a broker failure: it does not count towards the circuit breaker.
 */
export class TopicWaitError extends OutboxError {
  constructor(readonly missing: TopicMissingError, timeoutMs: number, rows: number) {
    super(`${missing.message}; its rows wait for it at most ${timeoutMs} ms (--missing-topic-timeout-ms), then go to the dead letters`, {
      retriable: true,
      context: { topic: missing.topic, rows },
      cause: missing,
    });
  }
}

export interface PublishBatchOptions {
  maxMessageBytes: number;
  /** How long a topic may be missing before its rows go to the dead letters (ms). */
  missingTopicTimeoutMs: number;
  policyOf(topic: string): DeadLetterPolicy;
  /** Send messages; one result per message, in order (./producer.ts). */
  send(messages: RelayMessage[]): Promise<SendResult[]>;
  /** Encodings configured (./encodingStep.ts): encode a message in place before it is sent. */
  encode?(message: RelayMessage): Promise<EncodeResult>;
  now?: () => number;
}

const keyOf = (row: ClaimedRow): string => `${row.topic}\u0000${row.key}`;

/**
 * Publish a claimed batch (rows in id order) so that one bad row never holds up the rest.
 *
 * Rows that fail validation, or cannot be turned into a message at all, are dead-lettered
 * without being sent. The others go out at once; the producer answers per message (a
 * partition's messages are acknowledged or refused together). Acknowledged rows are
 * published. A partition refused for a permanent reason is re-sent one row at a time, in
 * id order, to find the rows Kafka refuses; nothing acknowledged is sent again. A row
 * Kafka refuses for its timestamp alone (INVALID_TIMESTAMP) is sent once more stamped at
 * send time, its created_at in a header (./message.ts, stampAtSend). A partition refused for a reason that may pass, and a topic missing for less than
 * `missingTopicTimeoutMs`, are left unsent (a later batch retries them); a topic missing
 * for longer dead-letters its rows. A parked key's later rows in the batch are held back,
 * so the key's order survives.
 *
 * @throws PublishError only when the producer itself fails (not per message).
 */
/** Longest key (bytes) a parked key can have: outbox_parked_keys' primary key is a btree entry (at most ~2.7 kB with the topic). */
const MAX_PARKABLE_KEY_BYTES = 2_000;

export async function publishBatch(rows: ClaimedRow[], o: PublishBatchOptions): Promise<BatchOutcome> {
  const now = o.now ?? Date.now;
  const outcome: BatchOutcome = { published: [], deadLetters: [], held: [], unsent: [], unsentError: undefined };
  const parked = new Set<string>();
  const deadLetter = (row: ClaimedRow, errorName: string, reason: string): void => {
    let policy = o.policyOf(row.topic);
    // A key too long for a btree entry cannot be parked (sql/006_dead_letter_key_index.sql).
    if (policy === 'park' && Buffer.byteLength(row.key) > MAX_PARKABLE_KEY_BYTES) {
      policy = 'skip';
      reason += ` (its key is ${Buffer.byteLength(row.key)} bytes, too long to park by: its key's later rows go on)`;
    }
    outcome.deadLetters.push({ row, errorName, reason, policy });
    if (policy === 'park') parked.add(keyOf(row));
  };
  const leaveUnsent = (row: ClaimedRow, error: PublishError | TopicWaitError | RegistryWaitError): void => {
    outcome.unsent.push(row);
    outcome.unsentError ??= error;
  };

  // Keys with a row waiting for the schema registry: their later rows wait behind it.
  const waiting = new Map<string, RegistryWaitError>();
  const candidates: Array<{ row: ClaimedRow; message: RelayMessage; index: number }> = [];
  for (const row of rows) {
    if (parked.has(keyOf(row))) {
      outcome.held.push(row);
      continue;
    }
    const waitingFor = waiting.get(keyOf(row));
    if (waitingFor) {
      leaveUnsent(row, waitingFor);
      continue;
    }
    // The safety net: whatever keeps this row from being a message, named by the
    // validation or not, is this row's problem alone.
    let message: RelayMessage;
    try {
      const invalid = validateRow(row, o.maxMessageBytes);
      if (invalid) {
        deadLetter(row, invalid.name, invalid.reason);
        await traceRejectedRow(row, invalid.name, invalid.reason);
        continue;
      }
      message = toMessage(row);
    } catch (error) {
      const reason = `the row cannot be turned into a Kafka message: ${(error as Error)?.message ?? String(error)}`;
      deadLetter(row, 'validation:unencodable', reason);
      await traceRejectedRow(row, 'validation:unencodable', reason);
      continue;
    }
    if (o.encode) {
      let encoded: EncodeResult;
      try {
        encoded = await o.encode(message);
      } catch (error) {
        const wait = error instanceof RegistryWaitError ? error : new RegistryWaitError(error);
        waiting.set(keyOf(row), wait);
        leaveUnsent(row, wait);
        continue;
      }
      if (!encoded.ok) {
        deadLetter(row, encoded.errorName, encoded.reason);
        await traceRejectedRow(row, encoded.errorName, encoded.reason);
        continue;
      }
    }
    candidates.push({ row, message, index: candidates.length });
  }
  // Rows are in id order, so a key parked by an invalid row holds only its rows after
  // that one; its earlier rows are already among the candidates and go out.
  if (candidates.length === 0) return finish(outcome);

  // One PRODUCER span per message, open until this batch knows what became of it.
  const spans = await startPublishSpans(candidates.map((c) => c.message));
  candidates.forEach((c, i) => (c.message = spans.messages[i]!));
  const published = (c: { row: ClaimedRow; index: number }): void => {
    outcome.published.push(c.row);
    spans.acknowledged(c.index);
  };
  const deadLettered = (c: { row: ClaimedRow; index: number }, errorName: string, reason: string, error: unknown): void => {
    deadLetter(c.row, errorName, reason);
    spans.deadLettered(c.index, errorName, reason, error);
  };
  const unsent = (c: { row: ClaimedRow; index: number }, why: PublishError | TopicWaitError): void => {
    leaveUnsent(c.row, why);
    spans.notPublished(c.index, `not published by this batch, a later one sends it again: ${why.message}`, why.cause);
  };
  const held = (c: { row: ClaimedRow; index: number }): void => {
    outcome.held.push(c.row);
    spans.notPublished(c.index, 'not published: an earlier row of its key went to the dead letters and parked the key');
  };

  const results = await sendAll(o, spans, candidates.map((c) => c.message));

  // Partitions refused for good, to try one at a time.
  const isolate: typeof candidates = [];
  candidates.forEach((c, i) => {
    const result = results[i]!;
    if (result.acknowledged) return published(c);
    const { error } = result;
    if (error instanceof TopicMissingError) {
      if (now() - error.missingSinceMs < o.missingTopicTimeoutMs) {
        unsent(c, new TopicWaitError(error, o.missingTopicTimeoutMs, 1));
      } else if (parked.has(keyOf(c.row))) {
        held(c);
      } else {
        deadLettered(c, error.type, missingTopicReason(error, o.missingTopicTimeoutMs), error);
      }
      return;
    }
    const classified = classifyPublishError(error);
    if (classified.class === 'transient') unsent(c, new PublishError(classified, error, 1));
    else isolate.push(c);
  });

  // One at a time, in id order: only rows Kafka has not acknowledged are sent again.
  let stopped: PublishError | undefined;
  for (const c of isolate) {
    if (parked.has(keyOf(c.row))) {
      held(c);
      continue;
    }
    if (stopped) {
      unsent(c, stopped);
      continue;
    }
    let [result] = await sendAll(o, spans, [c.message]);
    if (!result!.acknowledged && c.message.timestampMs !== undefined && classifyPublishError(result!.error).name === 'INVALID_TIMESTAMP') {
      // The event is fine, its created_at is outside what the topic accepts: send it stamped now.
      stampAtSend(c.message);
      [result] = await sendAll(o, spans, [c.message]);
    }
    if (result!.acknowledged) {
      published(c);
      continue;
    }
    const classified = classifyPublishError(result!.error);
    if (classified.class === 'permanent') {
      deadLettered(c, classified.name, `Kafka refused the message: ${classified.name}: ${classified.message}`, result!.error);
    } else {
      // Something that may pass: stop here; this row and the rest wait for a later batch.
      stopped = new PublishError(classified, result!.error, 1);
      unsent(c, stopped);
    }
  }
  return finish(outcome);
}

async function sendAll(o: PublishBatchOptions, spans: PublishSpans<RelayMessage>, messages: RelayMessage[]): Promise<SendResult[]> {
  try {
    const results = await o.send(messages);
    if (results.length !== messages.length) throw new Error(`the producer answered for ${results.length} of ${messages.length} messages`);
    return results;
  } catch (error) {
    spans.failed(error);
    throw new PublishError(classifyPublishError(error), error, messages.length);
  }
}

function missingTopicReason(error: TopicMissingError, timeoutMs: number): string {
  return (
    `topic ${JSON.stringify(error.topic)} does not exist and Kafka did not create it within ${timeoutMs} ms ` +
    '(--missing-topic-timeout-ms): the broker does not create topics automatically (auto.create.topics.enable=false), ' +
    "or refuses the name because it collides with an existing topic that differs only in '.' versus '_'. " +
    'Create the topic, then replay the dead letter'
  );
}

function finish(outcome: BatchOutcome): BatchOutcome {
  const byId = (a: ClaimedRow, b: ClaimedRow): number => a.id - b.id;
  outcome.published.sort(byId);
  outcome.held.sort(byId);
  outcome.unsent.sort(byId);
  return outcome;
}
