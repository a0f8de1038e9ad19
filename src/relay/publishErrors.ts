/**
 * What the relay does when Kafka refuses a batch: retry it (transient) or move the rows
 * that cause it to the dead letters (permanent).
 */
export type PublishErrorClass = 'transient' | 'permanent';

export interface ClassifiedPublishError {
  class: PublishErrorClass;
  /**
   * Kafka's error name (e.g. MESSAGE_TOO_LARGE) whichever client reported it, else the
   * client's name for the error (a kafkajs error's name, a @platformatic/kafka error's
   * PLT_KFK_ code).
   */
  name: string;
  message: string;
}

// Kafka error codes that the same record will get again however often it is sent: the
// record or its topic is the problem, not the cluster's state. Named as Kafka names them:
// kafkajs' KafkaJSProtocolError.type, @platformatic/kafka's ProtocolError.apiId.
const PERMANENT = new Set([
  'CORRUPT_MESSAGE', // 2: the record fails its CRC or is malformed
  'MESSAGE_TOO_LARGE', // 10: larger than the topic's max.message.bytes
  'INVALID_TOPIC_EXCEPTION', // 17: the topic name is not legal
  'RECORD_LIST_TOO_LARGE', // 18
  'TOPIC_AUTHORIZATION_FAILED', // 29: no write permission on this topic
  'INVALID_TIMESTAMP', // 32: outside the topic's message.timestamp.before.max.ms / after.max.ms (publishBatch re-sends it stamped at send time)
  'INVALID_RECORD', // 87: the broker's validation rejects the record (e.g. compacted topic without key)
]);

// Everything else is transient: leader changes (NOT_LEADER_FOR_PARTITION,
// LEADER_NOT_AVAILABLE), timeouts, NOT_ENOUGH_REPLICAS, throttling, connection errors,
// an unknown topic still being created. Authentication and cluster-level authorization
// failures are transient too on purpose: they are the relay's configuration, not any
// row's fault, and dead-lettering every row because of a rotated password would empty
// the outbox into the dead letters; the breaker and the logs report them instead.

// The two clients' wrappers both lead to the Kafka error inside: kafkajs' "retries
// exceeded" has originalError/cause, its aggregate errors `errors`; @platformatic/kafka's
// MultipleErrors (retries, a response with several errors) has `errors`, and its
// AuthenticationError the failed SASL response as `cause`.

/** Walk the clients' wrappers to the errors inside. */
/** The errors inside `error` (kafkajs' and @platformatic/kafka's wrappers), innermost first. */
export function innermost(error: unknown): unknown[] {
  const found: unknown[] = [];
  const visit = (e: unknown, depth: number): void => {
    if (!e || typeof e !== 'object' || depth > 5) return;
    const o = e as { originalError?: unknown; cause?: unknown; errors?: unknown[] };
    if (Array.isArray(o.errors) && o.errors.length > 0) {
      for (const inner of o.errors) visit(inner, depth + 1);
      return;
    }
    if (o.originalError) return visit(o.originalError, depth + 1);
    if (o.cause) return visit(o.cause, depth + 1);
    found.push(e);
  };
  visit(error, 0);
  return found.length > 0 ? found : [error];
}

/** @platformatic/kafka's error codes (GenericError.code) start with this. */
const PLATFORMATIC_PREFIX = 'PLT_KFK_';

/**
 * Kafka's name of a protocol error (MESSAGE_TOO_LARGE...), from either client: kafkajs
 * puts it in `type`, @platformatic/kafka's ProtocolError (code PLT_KFK_PROTOCOL) in `apiId`.
 */
export function kafkaErrorType(error: unknown): string | undefined {
  if (!error || typeof error !== 'object') return undefined;
  const e = error as { type?: unknown; apiId?: unknown; code?: unknown };
  if (typeof e.type === 'string') return e.type;
  if (e.code === `${PLATFORMATIC_PREFIX}PROTOCOL` && typeof e.apiId === 'string') return e.apiId;
  return undefined;
}

function clientErrorName(e: { name?: unknown; code?: unknown }): string | undefined {
  // A @platformatic/kafka error's name is the plain 'Error'; its code says what it is.
  if (typeof e.code === 'string' && e.code.startsWith(PLATFORMATIC_PREFIX)) return e.code;
  return typeof e.name === 'string' ? e.name : undefined;
}

/** Classify an error from a producer adapter's send (kafkajs or @platformatic/kafka). */
export function classifyPublishError(error: unknown): ClassifiedPublishError {
  const inner = innermost(error);
  for (const e of inner) {
    const type = kafkaErrorType(e);
    if (type !== undefined && PERMANENT.has(type)) {
      return { class: 'permanent', name: type, message: (e as Error).message ?? type };
    }
  }
  const first = inner[0] as { type?: unknown; name?: unknown; code?: unknown; message?: unknown };
  const name = kafkaErrorType(first) ?? clientErrorName(first ?? {}) ?? 'Error';
  return { class: 'transient', name, message: typeof first?.message === 'string' ? first.message : String(first) };
}
