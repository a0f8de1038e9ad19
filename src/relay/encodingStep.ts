import { createRowEncoder, RowEncodingError, type ResolvedEncodingOptions, type RowEncoder } from '../encodings/index.js';
import { describeError, OutboxError } from '../shared/errors.js';
import { HEADERS } from '../shared/kafka.js';
import type { Logger } from '../shared/logger.js';
import type { RelayMessage } from './message.js';

/**
 * The schema registry did not answer (down, timing out, 5xx): the rows that need it (and
 * their keys' later rows) wait for a later batch, nothing is dead-lettered. Not a Kafka
 * failure: it does not count towards the circuit breaker.
 */
export class RegistryWaitError extends OutboxError {
  constructor(cause: unknown) {
    super(`the schema registry did not answer; the rows that need it wait for it: ${describeError(cause)}`, { retriable: true, cause });
  }
}

/** What became of one message's encoding. */
export type EncodeResult = { ok: true } | { ok: false; errorName: string; reason: string };

/**
 * The relay's step between a row's message and its send, when encodings are configured
 * (docs/encodings.md): a matching rule turns the JSON value (and the key, when the rule
 * has a key encoding) into Confluent's wire format; a row that does not fit its schema is
 * that row's problem alone; the registry not answering is the batch's, for later.
 */
export interface EncodingStep {
  /** Resolves fixed topics' schemas; a registry down now is only logged (rows wait for it later). */
  start(logger: Logger): Promise<void>;
  /**
   * Encode `message` in place.
   * @throws RegistryWaitError (or the encoder's retriable error) when the registry did not answer
   */
  encode(message: RelayMessage): Promise<EncodeResult>;
  close(): Promise<void>;
}

/** The encoding step of an outbox, or undefined without encodings (JSON as it is). */
export function encodingStep(encodings: ResolvedEncodingOptions | undefined, outbox: string): EncodingStep | undefined {
  return encodings ? encoderStep(createRowEncoder(encodings, { outbox })) : undefined;
}

/**
 * The step around an encoder. `topicOf`: the topic a row's message goes to, when its
 * owner renames it (a tenant's topic template): rules match it and subjects name it.
 */
export function encoderStep(encoder: RowEncoder, topicOf: (topic: string) => string = (topic) => topic): EncodingStep {
  return {
    async start(logger) {
      try {
        await encoder.start();
      } catch (error) {
        // A refused or incompatible schema is a configuration error: the relay does not start.
        if (!(error instanceof OutboxError) || !error.retriable) throw error;
        // Not fatal: the rows to encode resolve their schemas when they come, and wait while it is down.
        logger.warn({ err: describeError(error) }, 'the schema registry did not answer at start; rows to encode wait for it');
      }
    },
    async encode(message) {
      let parts;
      try {
        parts = await encoder.encode({
          topic: topicOf(message.topic),
          key: message.key,
          value: typeof message.value === 'string' ? message.value : message.value === null ? null : message.value.toString('utf8'),
          headers: message.headers,
        });
      } catch (error) {
        if (error instanceof RowEncodingError) return { ok: false, errorName: error.errorName, reason: error.message };
        if (error instanceof OutboxError && error.retriable) throw new RegistryWaitError(error);
        // An incompatible schema, refused credentials: nothing a later batch does better
        // for this row, and no reason to stop the others. The dead letter says which.
        return { ok: false, errorName: `encoding:${error instanceof Error ? error.name : 'error'}`, reason: describeError(error) };
      }
      if (parts === undefined) return { ok: true };
      message.value = parts.value;
      if (typeof parts.key !== 'string') message.keyBytes = parts.key;
      // The bytes are Confluent's framing now, not JSON text.
      delete message.headers[HEADERS.contentType];
      return { ok: true };
    },
    close: () => encoder.close(),
  };
}
