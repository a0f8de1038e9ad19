import type { KafkaMessage } from 'kafkajs';
import { describeError } from '../shared/errors.js';
import { HEADERS } from '../shared/kafka.js';
import { traceSkipped } from '../shared/tracing.js';
import { DecodeError, decodeHeaders, decodeValue } from './decode.js';
import type { DeadLetterReason } from './deadLetterTopic.js';
import type { Failure } from './outcome.js';
import type { ResolvedConsumerOptions } from './options.js';
import type { ConsumedMessage } from './types.js';
import { unknownSchema, type SchemaDecoding } from './schemaDecoding.js';

// Before any transaction: each message of a chunk decoded and given its idempotency key.
// A message that cannot be (undecodable, no usable key) fails for good, here.

/** Longest idempotency key accepted; longer ones would not fit a btree index entry safely. */
const MAX_KEY_CHARS = 512;

/** One message of a transaction, ready for its handler. */
export interface Prepared<V> {
  raw: KafkaMessage;
  message: ConsumedMessage<V>;
  attempt: number;
  /** No usable idempotency key: processed without dedup. */
  missingKey: boolean;
}

/**
 * Decode the messages of a chunk and find their idempotency keys, in offset order.
 * @returns the messages ready for their handlers, up to the first that cannot be
 *   handled (undecodable, no usable key), and that one's failure
 */
export function prepareChunk<V>(
  options: ResolvedConsumerOptions<V>,
  topic: string,
  partition: number,
  chunk: KafkaMessage[],
  attemptOf: (offset: string) => number,
  schemas?: SchemaDecoding,
): { prepared: Prepared<V>[]; failure: Failure | undefined } {
  const prepared: Prepared<V>[] = [];
  for (const [index, raw] of chunk.entries()) {
    const attempt = attemptOf(raw.offset);
    const result = prepare(options, topic, partition, raw, attempt, schemas);
    if ('error' in result) {
      // An unknown schema id may be registered in a moment: retried like a transient error (consumer.ts), no reason yet.
      if (result.reason === undefined) return { prepared, failure: { index, error: result.error, attempt } };
      void traceSkipped({ topic, partition, offset: raw.offset, key: raw.key?.toString('utf8') ?? null, headers: decodeHeaders(raw.headers) }, options.groupId, attempt, 'dead_letter', { 'outbox.dead_letter.reason': result.reason });
      return { prepared, failure: { index, error: result.error, reason: result.reason, attempt } };
    }
    prepared.push(result);
  }
  return { prepared, failure: undefined };
}

/** Decode a message and find its idempotency key; a failure here is permanent. */
function prepare<V>(
  options: ResolvedConsumerOptions<V>,
  topic: string,
  partition: number,
  raw: KafkaMessage,
  attempt: number,
  schemas: SchemaDecoding | undefined,
): Prepared<V> | { error: unknown; reason: DeadLetterReason | undefined } {
  const headers = decodeHeaders(raw.headers);
  let value: V;
  let schemaId: number | undefined;
  try {
    // A custom decoder or 'raw' gets the bytes as they are, framed or not.
    const framed = schemas && raw.value !== null && (options.decode === 'auto' || options.decode === 'json') ? schemas.decode(raw.value) : undefined;
    if (framed) ({ value, schemaId } = framed as { value: V; schemaId: number });
    else value = decodeValue(raw.value, headers, options.decode) as V;
  } catch (error) {
    const wrapped = error instanceof DecodeError ? error : new DecodeError(`undecodable value: ${describeError(error)}`, { offset: raw.offset }, error);
    return { error: wrapped, reason: unknownSchema(error) ? undefined : 'undecodable' };
  }
  const message: ConsumedMessage<V> = {
    topic,
    partition,
    offset: raw.offset,
    key: raw.key === null ? null : raw.key.toString('utf8'),
    value,
    rawValue: raw.value,
    headers,
    messageId: headers[HEADERS.messageId],
    idempotencyKey: undefined,
    timestamp: new Date(Number(raw.timestamp)),
    ...(schemaId !== undefined && { schemaId }),
  };
  let key: string | undefined | null;
  let keyError: unknown;
  try {
    key = options.idempotencyKey ? options.idempotencyKey(message) : message.messageId;
  } catch (error) {
    keyError = error;
  }
  if (typeof key === 'string' && key !== '' && key.length <= MAX_KEY_CHARS && !key.includes('\u0000')) {
    message.idempotencyKey = key;
    return { raw, message, attempt, missingKey: false };
  }
  if (options.onMissingKey === 'process-without-dedup') return { raw, message, attempt, missingKey: true };
  const error = new DecodeError(keyProblem(options, key, keyError), { offset: raw.offset }, keyError);
  error.name = 'MissingIdempotencyKey';
  return { error, reason: 'missing-key' };
}

/** What is wrong with a message's idempotency key, in the words of the dead letter. */
function keyProblem<V>(options: ResolvedConsumerOptions<V>, key: unknown, keyError: unknown): string {
  if (keyError !== undefined) return `the idempotencyKey function failed: ${describeError(keyError)}`;
  if (options.idempotencyKey) {
    if (key === undefined || key === null) return 'no idempotency key (the idempotencyKey function returned none)';
    if (key === '') return 'empty idempotency key (the idempotencyKey function returned an empty string)';
  } else {
    if (key === undefined) return `no idempotency key (no ${HEADERS.messageId} header)`;
    if (key === '') return `empty idempotency key (the ${HEADERS.messageId} header is present but empty)`;
  }
  return `unusable idempotency key (${typeof key === 'string' ? `${key.length} characters, at most ${MAX_KEY_CHARS}, no NUL` : typeof key})`;
}
