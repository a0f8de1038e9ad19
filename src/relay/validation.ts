import type { ClaimedRow } from './sql/claim.js';
import { topicNameProblem } from '../shared/kafkaNames.js';
import { headersProblem } from './message.js';

/** Why a row can never be published as it is. */
export interface ValidationFailure {
  /** `validation:<what>`, stored as the dead letter's error_name. */
  name: string;
  reason: string;
}

/**
 * Checks made before a row is sent, so that a row Kafka would refuse, or that should not
 * be sent, goes to the dead letters at once with a clear reason instead of being retried.
 *
 * @param maxMessageBytes upper bound of key + value + headers, in bytes
 */
export function validateRow(row: ClaimedRow, maxMessageBytes: number): ValidationFailure | undefined {
  const topicProblem = topicNameProblem(row.topic);
  if (topicProblem) return { name: 'validation:invalid_topic', reason: `topic ${topicProblem}` };
  if (row.key === '') {
    return { name: 'validation:empty_key', reason: 'the key is empty: every event needs its entity key (it decides partition and order)' };
  }
  const headers = headersProblem(row.headers as unknown);
  if (headers) return { name: 'validation:invalid_headers', reason: headers };
  let size = Buffer.byteLength(row.key);
  if (row.payload !== null) size += Buffer.byteLength(row.payload);
  else if (row.payload_bytes !== null) size += row.payload_bytes.length;
  if (row.headers) {
    for (const [name, value] of Object.entries(row.headers)) {
      size += Buffer.byteLength(name) + Buffer.byteLength(typeof value === 'string' ? value : JSON.stringify(value ?? ''));
    }
  }
  if (size > maxMessageBytes) {
    return {
      name: 'validation:too_large',
      reason: `the message is ${size} bytes, over the relay's limit of ${maxMessageBytes} (--max-message-bytes)`,
    };
  }
  return undefined;
}
