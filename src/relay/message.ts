import type { Message } from 'kafkajs';
import { HEADERS } from '../shared/kafka.js';
import type { ClaimedRow } from './sql/claim.js';

/** One outbox row as the Kafka message the relay publishes. */
export function toKafkaMessage(row: ClaimedRow): Message {
  const headers: Record<string, string> = {};
  if (row.headers) {
    for (const [name, value] of Object.entries(row.headers)) {
      if (value !== null && value !== undefined) headers[name] = typeof value === 'string' ? value : JSON.stringify(value);
    }
  }
  let value: Buffer | string | null = null;
  if (row.payload !== null) {
    value = row.payload;
    headers[HEADERS.contentType] = 'application/json';
  } else if (row.payload_bytes !== null) {
    value = row.payload_bytes;
  }
  headers[HEADERS.messageId] = row.message_id;
  headers[HEADERS.outboxId] = String(row.id);
  return {
    key: row.key,
    value,
    headers,
    timestamp: String(row.created_at.getTime()),
  };
}

/** Rows in claim order, grouped by topic; each topic's messages keep that order. */
export function groupByTopic(rows: readonly ClaimedRow[]): Array<{ topic: string; messages: Message[] }> {
  const byTopic = new Map<string, Message[]>();
  for (const row of rows) {
    let list = byTopic.get(row.topic);
    if (!list) byTopic.set(row.topic, (list = []));
    list.push(toKafkaMessage(row));
  }
  return [...byTopic].map(([topic, messages]) => ({ topic, messages }));
}
