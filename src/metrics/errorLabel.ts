/**
 * The `error_class` label of the metrics and the readiness checks: a short, bounded name
 * for what kind of error happened, never its message. (Not the consumer's `ErrorClass`,
 * which says whether an error is transient or permanent.)
 */

/**
 * A short, bounded label for an error: what kind of failure, never its message.
 *
 * - kafkajs protocol errors: `kafka_<type>` (e.g. `kafka_not_leader_or_follower`);
 *   other kafkajs errors: `kafka_<name>` (e.g. `kafka_connection_error`); a
 *   "retries exceeded" wrapper is labelled by its cause.
 * - Postgres errors: `postgres_<SQLSTATE>` (e.g. `postgres_57p01`).
 * - Node.js socket errors: `network_<code>` (e.g. `network_econnrefused`).
 * - outbox-relay errors: their class name in snake case (e.g. `connection_error`).
 * - anything else: `other`.
 */
export function errorLabel(error: unknown, depth = 0): string {
  if (!(error instanceof Error)) return 'other';
  const e = error as Error & { code?: unknown; type?: unknown; cause?: unknown };
  if (e.name === 'KafkaJSNumberOfRetriesExceeded' || e.name === 'KafkaJSNonRetriableError') {
    if (e.cause instanceof Error && depth < 3) return errorLabel(e.cause, depth + 1);
  }
  if (e.name.startsWith('KafkaJS')) {
    if (typeof e.type === 'string' && /^[A-Z_]{1,60}$/.test(e.type)) return `kafka_${e.type.toLowerCase()}`;
    return `kafka_${snake(e.name.slice('KafkaJS'.length)) || 'error'}`;
  }
  if (typeof e.code === 'string' && e.code.startsWith('PLT_KFK_')) {
    // @platformatic/kafka: a protocol error names Kafka's error in apiId; a wrapper
    // (MultipleErrors) is labelled by its first error.
    const apiId = (e as { apiId?: unknown }).apiId;
    if (typeof apiId === 'string' && /^[A-Z_]{1,60}$/.test(apiId)) return `kafka_${apiId.toLowerCase()}`;
    const inner = (e as { errors?: unknown[] }).errors?.[0];
    if (inner instanceof Error && depth < 3) return errorLabel(inner, depth + 1);
    return e.code === 'PLT_KFK_NETWORK' ? 'kafka_connection_error' : `kafka_${e.code.slice('PLT_KFK_'.length).toLowerCase().replace(/[^a-z0-9_]/g, '')}`;
  }
  if (typeof e.code === 'string') {
    if (/^[0-9A-Z]{5}$/.test(e.code)) return `postgres_${e.code.toLowerCase()}`;
    if (/^E[A-Z]{2,20}$/.test(e.code)) return `network_${e.code.toLowerCase()}`;
  }
  if (/^[A-Z][A-Za-z]{0,40}Error$/.test(e.name) && e.name !== 'Error') {
    // Our own errors (ConnectionError, OutboxError...) and the built-in ones (TypeError).
    // Wrappers are labelled by what they wrap.
    if (e.cause instanceof Error && depth < 3 && WRAPPERS.has(e.name)) {
      const inner = errorLabel(e.cause, depth + 1);
      if (inner !== 'other') return inner;
    }
    return snake(e.name);
  }
  return 'other';
}

/** Errors of ours that wrap a Kafka or Postgres error with context. */
const WRAPPERS = new Set(['ConnectionError', 'PublishError']);

function snake(name: string): string {
  return name
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '');
}
