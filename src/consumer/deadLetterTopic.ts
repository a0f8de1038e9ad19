import { CompressionTypes, type IHeaders, type KafkaMessage, type Producer } from 'kafkajs';

/** Why a message went to the dead-letter topic (the `dead-letter-reason` header). */
export type DeadLetterReason =
  /** The handler failed with an error the classifier calls permanent. */
  | 'permanent-error'
  /** The handler failed with transient errors maxAttempts times. */
  | 'retries-exhausted'
  /** The value could not be decoded (not JSON where JSON is expected). */
  | 'undecodable'
  /** No idempotency key (no message-id header, or the key function returned none). */
  | 'missing-key';

/** Header names the consumer adds to a dead-lettered message. */
export const DEAD_LETTER_HEADERS = {
  reason: 'dead-letter-reason',
  error: 'dead-letter-error',
  errorName: 'dead-letter-error-name',
  /** The SQLSTATE of a Postgres error (e.g. `23505`), when the error is one. */
  errorCode: 'dead-letter-error-code',
  /** The constraint a Postgres error names (e.g. `orders_pkey`), when it names one. */
  errorConstraint: 'dead-letter-error-constraint',
  attempts: 'dead-letter-attempts',
  consumerGroup: 'dead-letter-consumer-group',
  topic: 'dead-letter-original-topic',
  partition: 'dead-letter-original-partition',
  offset: 'dead-letter-original-offset',
  timestamp: 'dead-letter-original-timestamp',
  at: 'dead-letter-at',
} as const;

/**
 * A message the consumer gives up on, and why: what goes to the dead-letter topic. Not
 * the relay's dead letter (a row of outbox_dead_letters, `DeadLetter` in
 * commands/deadLetters.ts), which never reached Kafka.
 */
export interface ConsumerDeadLetter {
  topic: string;
  partition: number;
  message: KafkaMessage;
  reason: DeadLetterReason;
  error: unknown;
  attempts: number;
  consumerGroup: string;
}

// Headers are small metadata, not a log: a long error message is cut.
const MAX_ERROR_CHARS = 1_000;

/**
 * The dead-letter message: the original key, value and headers, byte for byte, plus the
 * dead-letter headers. A replay tool can publish key, value and original headers back
 * to the original topic; the message-id header is unchanged, so a message that was
 * handled after all is recognised as a duplicate.
 */
export function deadLetterMessage(d: ConsumerDeadLetter): { key: Buffer | null; value: Buffer | null; headers: IHeaders } {
  const headers: IHeaders = {};
  for (const [name, value] of Object.entries(d.message.headers ?? {})) {
    // Earlier dead-letter headers are replaced, not stacked, when a replayed message fails again.
    if (value !== undefined && !name.startsWith('dead-letter-')) headers[name] = value;
  }
  const { name, message: text } = describeThrown(d.error);
  headers[DEAD_LETTER_HEADERS.reason] = d.reason;
  headers[DEAD_LETTER_HEADERS.error] = text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}...` : text;
  headers[DEAD_LETTER_HEADERS.errorName] = name.length > MAX_ERROR_CHARS ? name.slice(0, MAX_ERROR_CHARS) : name;
  const database = databaseErrorOf(d.error);
  if (database?.code) headers[DEAD_LETTER_HEADERS.errorCode] = database.code;
  if (database?.constraint) headers[DEAD_LETTER_HEADERS.errorConstraint] = database.constraint.slice(0, MAX_ERROR_CHARS);
  headers[DEAD_LETTER_HEADERS.attempts] = String(d.attempts);
  headers[DEAD_LETTER_HEADERS.consumerGroup] = d.consumerGroup;
  headers[DEAD_LETTER_HEADERS.topic] = d.topic;
  headers[DEAD_LETTER_HEADERS.partition] = String(d.partition);
  headers[DEAD_LETTER_HEADERS.offset] = d.message.offset;
  headers[DEAD_LETTER_HEADERS.timestamp] = d.message.timestamp;
  headers[DEAD_LETTER_HEADERS.at] = new Date().toISOString();
  return { key: d.message.key, value: d.message.value, headers };
}

/**
 * The Postgres error in `thrown` or its cause (a handler error wrapping one, such as
 * HandlerLeftTransactionAborted): its SQLSTATE and constraint, when it has them.
 */
function databaseErrorOf(thrown: unknown): { code: string; constraint: string | undefined } | undefined {
  for (let e = thrown, depth = 0; e !== null && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const { code, constraint } = e as { code?: unknown; constraint?: unknown };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return { code, constraint: typeof constraint === 'string' && constraint !== '' ? constraint : undefined };
  }
  return undefined;
}

/**
 * A name and a message for whatever a handler threw, never empty. An Error (or an object
 * with a string `message`, such as an error from another realm) gives its own; anything
 * else is `NonErrorThrown` with what it was: `non-error thrown: undefined`,
 * `non-error thrown: string "boom"`, `non-error thrown: object {"code":7}`.
 */
function describeThrown(thrown: unknown): { name: string; message: string } {
  const like = thrown as { name?: unknown; message?: unknown } | null | undefined;
  if (thrown instanceof Error || (typeof thrown === 'object' && thrown !== null && typeof like?.message === 'string')) {
    // pg names every server error 'error'; its class is DatabaseError.
    const own = typeof like?.name === 'string' && like.name !== '' ? like.name : 'Error';
    const name = own === 'error' && databaseErrorOf(thrown) !== undefined ? 'DatabaseError' : own;
    const message = like?.message as string;
    return { name, message: message !== '' ? message : `${name} (no message)` };
  }
  return { name: 'NonErrorThrown', message: `non-error thrown: ${renderValue(thrown)}` };
}

function renderValue(value: unknown): string {
  switch (typeof value) {
    case 'undefined':
      return 'undefined';
    case 'string':
      return `string ${JSON.stringify(value)}`;
    case 'number':
    case 'bigint':
    case 'boolean':
      return `${typeof value} ${String(value)}`;
    case 'symbol':
      return `symbol ${value.toString()}`;
    case 'function':
      return `function ${value.name || '(anonymous)'}`;
    default: {
      if (value === null) return 'null';
      try {
        const json = JSON.stringify(value);
        if (typeof json === 'string') return `object ${json}`;
      } catch {
        // circular, or a toJSON that throws
      }
      return `object ${Object.prototype.toString.call(value)}`;
    }
  }
}

/**
 * Publish to the dead-letter topic with acks from all in-sync replicas. Throws when the
 * broker does not acknowledge: the caller must then not commit the original offset.
 */
export async function publishDeadLetter(producer: Producer, deadLetterTopic: string, d: ConsumerDeadLetter): Promise<void> {
  await producer.send({
    topic: deadLetterTopic,
    acks: -1,
    compression: CompressionTypes.None,
    messages: [deadLetterMessage(d)],
  });
}
