import { OutboxError } from '../shared/errors.js';
import { classifyPublishError, type ClassifiedPublishError } from './publishErrors.js';
import { validateRow } from './validation.js';
import type { ClaimedRow } from './sql/claim.js';

/** What happens to a key's later rows when one of its rows is dead-lettered. */
export type DeadLetterPolicy = 'park' | 'skip';

export interface DeadLetterPlan {
  row: ClaimedRow;
  errorName: string;
  reason: string;
  policy: DeadLetterPolicy;
}

export interface BatchOutcome {
  /** Acknowledged by Kafka: mark sent. */
  published: ClaimedRow[];
  /** Never publishable as they are: move to the dead letters. */
  deadLetters: DeadLetterPlan[];
  /** Later rows of a key parked in this batch: left unsent, in order, behind the parked row. */
  held: ClaimedRow[];
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

export interface PublishBatchOptions {
  maxMessageBytes: number;
  policyOf(topic: string): DeadLetterPolicy;
  /** Send rows in one request, in order; rejects with kafkajs' error. */
  send(rows: ClaimedRow[]): Promise<void>;
}

const keyOf = (row: ClaimedRow): string => `${row.topic}\u0000${row.key}`;

/**
 * Publish a claimed batch (rows in id order) so that one bad row never holds up the rest.
 *
 * Rows that fail validation are dead-lettered without being sent. The others go out in
 * one request; if Kafka refuses it for a permanent reason, the rows are sent one by one,
 * in order, to find the ones it refuses. A parked key's later rows in the batch are held
 * back, so the key's order survives. A transient refusal throws {@link PublishError}: the
 * caller rolls the whole batch back and retries it (rows sent meanwhile come again:
 * at least once).
 */
export async function publishBatch(rows: ClaimedRow[], o: PublishBatchOptions): Promise<BatchOutcome> {
  const outcome: BatchOutcome = { published: [], deadLetters: [], held: [] };
  const parked = new Set<string>();
  const deadLetter = (row: ClaimedRow, errorName: string, reason: string): void => {
    const policy = o.policyOf(row.topic);
    outcome.deadLetters.push({ row, errorName, reason, policy });
    if (policy === 'park') parked.add(keyOf(row));
  };

  const candidates: ClaimedRow[] = [];
  for (const row of rows) {
    if (parked.has(keyOf(row))) {
      outcome.held.push(row);
      continue;
    }
    const invalid = validateRow(row, o.maxMessageBytes);
    if (invalid) deadLetter(row, invalid.name, invalid.reason);
    else candidates.push(row);
  }
  // Rows are in id order, so a key parked by an invalid row holds only its rows after
  // that one; its earlier rows are already among the candidates and go out.
  const sendable = candidates;
  if (sendable.length === 0) return sortHeld(outcome);

  try {
    await o.send(sendable);
    outcome.published = sendable;
    return sortHeld(outcome);
  } catch (error) {
    const classified = classifyPublishError(error);
    if (classified.class === 'transient') throw new PublishError(classified, error, sendable.length);
  }

  // A permanent refusal: find the rows it is about, one at a time, in id order.
  for (const row of sendable) {
    if (parked.has(keyOf(row))) {
      outcome.held.push(row);
      continue;
    }
    try {
      await o.send([row]);
      outcome.published.push(row);
    } catch (error) {
      const classified = classifyPublishError(error);
      if (classified.class === 'transient') throw new PublishError(classified, error, sendable.length);
      deadLetter(row, classified.name, `Kafka refused the message: ${classified.name}: ${classified.message}`);
    }
  }
  return sortHeld(outcome);
}

function sortHeld(outcome: BatchOutcome): BatchOutcome {
  outcome.held.sort((a, b) => a.id - b.id);
  return outcome;
}
