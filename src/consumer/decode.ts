import { OutboxError } from '../shared/errors.js';
import { HEADERS } from '../shared/kafka.js';

/**
 * A message value that cannot be decoded (not JSON where JSON is expected, or a custom
 * decoder that threw). Never retriable: the same bytes fail the same way every time, so
 * the consumer dead-letters the message at once.
 */
export class DecodeError extends OutboxError {
  constructor(message: string, context?: Record<string, unknown>, cause?: unknown) {
    super(message, { retriable: false, context, cause });
  }
}

/**
 * How the consumer turns a Kafka value into the handler's `message.value`.
 *
 * - `'auto'` (default): JSON when the `content-type` header says `application/json` (the
 *   relay sets it on JSON payloads), otherwise the raw bytes (a Buffer).
 * - `'json'`: always JSON; a value that does not parse is a DecodeError.
 * - `'raw'`: always the raw bytes.
 * - a function: your decoder (Avro, Protobuf); anything it throws becomes a DecodeError.
 *
 * A tombstone (null value) is `null` whatever the mode.
 */
export type ValueDecoder =
  | 'auto'
  | 'json'
  | 'raw'
  | ((value: Buffer, headers: Readonly<Record<string, string>>) => unknown);

/** Kafka headers as strings: the first value of each, UTF-8 decoded. */
export function decodeHeaders(headers: Record<string, Buffer | string | (Buffer | string)[] | undefined> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!headers) return out;
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    const first = Array.isArray(value) ? value[0] : value;
    if (first !== undefined) out[name] = first.toString();
  }
  return out;
}

/** @throws DecodeError with a reason an operator can act on */
export function decodeValue(value: Buffer | null, headers: Readonly<Record<string, string>>, decoder: ValueDecoder): unknown {
  if (value === null) return null;
  if (decoder === 'raw') return value;
  if (typeof decoder === 'function') {
    try {
      return decoder(value, headers);
    } catch (error) {
      throw new DecodeError(`undecodable value: the decoder failed: ${(error as Error)?.message ?? String(error)}`, undefined, error);
    }
  }
  const contentType = headers[HEADERS.contentType];
  if (decoder === 'auto' && !(contentType !== undefined && /^application\/json\b/i.test(contentType))) return value;
  try {
    return JSON.parse(value.toString('utf8'));
  } catch (error) {
    throw new DecodeError(
      `undecodable value: not JSON (${decoder === 'auto' ? `content-type ${contentType}` : "decode: 'json'"}): ${(error as Error).message}`,
      { bytes: value.length },
      error,
    );
  }
}
