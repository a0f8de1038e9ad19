import { CompressionTypes, Partitioners, type Kafka, type Producer } from 'kafkajs';
import { groupByTopic } from './message.js';
import type { ClaimedRow } from './sql/claim.js';

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
} as const;

/**
 * The relay's way to Kafka: one request per batch, acks=all, connected on first use and
 * again after the broker dropped the connection.
 *
 * The Java-compatible murmur2 partitioner (DefaultPartitioner) makes Java producers and
 * consumers agree on a key's partition. Not idempotent (kafkajs marks that experimental)
 * and maxInFlightRequests left open: one key is never in two sends at once (each key
 * belongs to one worker, whose sends are sequential), so a retried request cannot
 * overtake a later one of the same key.
 */
export class BatchProducer {
  private readonly producer: Producer;
  private connected = false;

  constructor(kafka: Kafka, private readonly compression: keyof typeof COMPRESSION) {
    this.producer = kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: true,
    });
    this.producer.on(this.producer.events.DISCONNECT, () => {
      this.connected = false;
    });
  }

  /** Send rows in one request, in order; rejects with kafkajs' error. */
  async send(rows: ClaimedRow[]): Promise<void> {
    if (!this.connected) {
      await this.producer.connect();
      this.connected = true;
    }
    await this.producer.sendBatch({
      topicMessages: groupByTopic(rows),
      acks: -1,
      compression: COMPRESSION[this.compression],
    });
  }

  async disconnect(): Promise<void> {
    await this.producer.disconnect().catch(() => undefined);
  }
}
