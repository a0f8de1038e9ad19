import { CompressionTypes, Partitioners, type Kafka, type Message, type Producer } from 'kafkajs';
import type { RelayMessage } from './message.js';
import { OutboxError } from '../shared/errors.js';
import type { MessageProducer, SendResult } from './messageProducer.js';
import { partitionGroups } from './partitioner.js';
import { KafkajsPartitionCounts, TopicMetadata } from './topicMetadata.js';
import type { ResolvedRelayOptions } from './options.js';
import type { Logger } from '../shared/logger.js';
import { PlatformaticProducer } from './platformaticProducer.js';
import { traceRequest } from '../shared/tracing.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';

export type { MessageProducer, SendResult } from './messageProducer.js';

export const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
} as const;

/**
 * The kafkajs adapter of {@link MessageProducer} (`producer: 'kafkajs'`; the default is
 * platformatic, ./platformaticProducer.ts), the only one exactly-once delivery takes.
 *
 * The relay partitions itself (Java's murmur2, ./partitioner.ts, over the partition
 * counts of ./topicMetadata.ts) and sends one produce request per partition, all at once:
 * a produce request covering several partitions fails as a whole in kafkajs (its first
 * partition error is thrown, the others' outcome is lost, and a retry re-sends partitions
 * the broker had already appended), whereas one partition's request is appended or not.
 * So each partition's result is known, and a refusal re-sends nothing acknowledged.
 *
 * A topic the broker does not know is never handed to the sending producer: kafkajs
 * refreshes the metadata of all of a producer's topics at once, and one missing topic
 * would fail every other topic's sends. Its messages are refused with a
 * TopicMissingError instead, without being sent.
 *
 * Not idempotent (kafkajs marks that experimental) and maxInFlightRequests left open:
 * one key is never in two sends at once (each key belongs to one worker, whose sends are
 * sequential), so a retried request cannot overtake a later one of the same key.
 */
class BatchProducer implements MessageProducer {
  readonly adapter = 'kafkajs';
  private readonly producer: Producer;
  private readonly topics: KafkajsTopicMetadata;
  private connected = false;
  private announced = false;

  constructor(
    kafka: Kafka,
    private readonly compression: keyof typeof COMPRESSION,
    private readonly logger?: Logger,
  ) {
    this.producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
    this.producer.on(this.producer.events.DISCONNECT, () => {
      this.connected = false;
    });
    this.topics = new KafkajsTopicMetadata(kafka);
  }

  private get metadata(): TopicMetadata {
    return this.topics.metadata;
  }

  async send(messages: readonly RelayMessage[]): Promise<SendResult[]> {
    const results: SendResult[] = new Array(messages.length);
    const refuse = (indexes: number[], error: unknown): void => {
      for (const i of indexes) results[i] = { acknowledged: false, error };
    };
    try {
      if (!this.connected) {
        await guardLibraryCall('kafkajs', 'producer.connect', () => this.producer.connect());
        this.connected = true;
      }
    } catch (error) {
      refuse(messages.map((_, i) => i), error);
      return results;
    }
    const counts = await this.metadata.partitions(messages.map((m) => m.topic));
    const groups = partitionGroups(messages, counts, (i, error) => refuse([i], error));
    await Promise.all(
      groups.map(async ({ topic, partition, indexes }) => {
        try {
          const request = indexes.map((i) => messages[i]!);
          const answer = await traceRequest(request, topic, partition, () =>
            guardLibraryCall('kafkajs', 'producer.sendBatch', () =>
              this.producer.sendBatch({
                topicMessages: [{ topic, messages: request.map((m) => toKafkajs(m, partition)) }],
                acks: -1,
                compression: COMPRESSION[this.compression],
              }),
            ),
          );
          // kafkajs sends nothing, and answers nothing, for a partition its own metadata
          // does not have yet (a topic just given more partitions): not acknowledged.
          if (!answer.some((r) => r.topicName === topic && r.partition === partition && r.errorCode === 0)) throw unanswered(topic, partition);
          for (const i of indexes) results[i] = { acknowledged: true };
          this.announce();
        } catch (error) {
          // Gone, or more partitions than we knew of: look the topic up again next time.
          this.metadata.forget(topic);
          refuse(indexes, error);
        }
      }),
    );
    return results;
  }

  private announce(): void {
    if (this.announced) return;
    this.announced = true;
    this.logger?.info({ producer: this.adapter }, 'producer adapter publishing');
  }

  async disconnect(): Promise<void> {
    await this.topics.close();
    await this.producer.disconnect().catch(() => undefined);
  }
}

/**
 * Partition counts through kafkajs (./topicMetadata.ts), asking the broker to create a
 * missing topic the way producing to it would (auto.create.topics.enable). Shared by the
 * kafkajs adapter and the exactly-once units (./transactionalUnit.ts).
 */
export class KafkajsTopicMetadata {
  readonly metadata: TopicMetadata;
  /** Only asks for metadata (an empty send): lets a broker auto-create a topic, as producing would. */
  private readonly creator: Producer;
  private creatorConnected = false;

  constructor(kafka: Kafka) {
    this.creator = kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: true,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 },
    });
    this.creator.on(this.creator.events.DISCONNECT, () => {
      this.creatorConnected = false;
    });
    this.metadata = new TopicMetadata(new KafkajsPartitionCounts(kafka), (topic) => this.createTopic(topic));
  }

  async close(): Promise<void> {
    await this.metadata.close();
    await this.creator.disconnect().catch(() => undefined);
  }

  private async createTopic(topic: string): Promise<void> {
    if (!this.creatorConnected) {
      await guardLibraryCall('kafkajs', 'producer.connect', () => this.creator.connect());
      this.creatorConnected = true;
    }
    // No messages: kafkajs requests the topic's metadata (with auto-creation allowed)
    // and waits for its leaders, then has nothing to produce.
    await guardLibraryCall('kafkajs', 'producer.sendBatch', () => this.creator.sendBatch({ topicMessages: [{ topic, messages: [] }], acks: -1 }));
  }
}

/** A send kafkajs reported done without the partition's answer in it: not acknowledged. */
export function unanswered(topic: string, partition: number): OutboxError {
  return new OutboxError(`Kafka's answer did not name partition ${partition} of ${JSON.stringify(topic)}: not sent`, { retriable: true, context: { topic, partition } });
}

/** A relay message as kafkajs sends it, to `partition`. */
export function toKafkajs(m: RelayMessage, partition: number): Message {
  // No timestamp: kafkajs stamps the message with the time it sends it.
  return { key: m.keyBytes ?? m.key, value: m.value, headers: m.headers, partition, ...(m.timestampMs !== undefined ? { timestamp: String(m.timestampMs) } : {}) };
}

/**
 * The relay's producer for its options: the `producer` setting picks the adapter
 * (kafkajs publishes through `kafka`; platformatic builds its own client from the
 * brokers, client id and security options).
 */
export function createMessageProducer(
  kafka: Kafka,
  options: Pick<ResolvedRelayOptions, 'compression'> & Partial<Pick<ResolvedRelayOptions, 'producer' | 'kafkaBrokers' | 'clientId' | 'kafkaSecurity' | 'logger'>>,
): MessageProducer {
  if (options.producer === 'platformatic') {
    const { kafkaBrokers, clientId, kafkaSecurity } = options;
    if (!kafkaBrokers || !clientId || !kafkaSecurity) throw new TypeError('the platformatic producer needs kafkaBrokers, clientId and kafkaSecurity');
    return new PlatformaticProducer({ kafkaBrokers, clientId, kafkaSecurity, compression: options.compression, logger: options.logger });
  }
  return new BatchProducer(kafka, options.compression, options.logger);
}
