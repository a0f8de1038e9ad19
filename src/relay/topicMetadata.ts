import type { Admin, Kafka } from 'kafkajs';
import { OutboxError } from '../shared/errors.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';

/**
 * Kafka has no such topic (UNKNOWN_TOPIC_OR_PARTITION) and did not create it when asked:
 * the broker does not create topics automatically, or refuses this name (one differing
 * from an existing topic only in `.` versus `_`). Nothing was sent.
 */
export class TopicMissingError extends OutboxError {
  /** Kafka's error name, as kafkajs' protocol errors carry it. */
  readonly type = 'UNKNOWN_TOPIC_OR_PARTITION';

  constructor(
    readonly topic: string,
    /** When the relay first found the topic missing (ms since the epoch). */
    readonly missingSinceMs: number,
    cause: unknown,
  ) {
    super(`topic ${JSON.stringify(topic)} does not exist and Kafka did not create it (UNKNOWN_TOPIC_OR_PARTITION)`, {
      retriable: true,
      context: { topic },
      cause,
    });
  }
}

export interface TopicMetadataOptions {
  /** Re-read a known topic's partition count after this long (ms). */
  maxAgeMs?: number;
  /** Ask again about a missing topic at most this often (ms); in between it is still missing. */
  missingRecheckMs?: number;
  now?: () => number;
}

/**
 * Where partition counts come from: the Kafka client of the producer adapter (kafkajs'
 * admin, or @platformatic/kafka's own metadata; see ./platformaticProducer.ts).
 */
export interface PartitionCountSource {
  /**
   * The topic's partition count as the broker says now.
   * @throws an error with `type` UNKNOWN_TOPIC_OR_PARTITION (possibly wrapped, see
   *   {@link isUnknownTopic}) when the broker does not know the topic; any other error
   *   when no answer came
   */
  partitionCount(topic: string): Promise<number>;
  close(): Promise<void>;
}

/** Partition counts through a kafkajs admin client (the kafkajs adapter's source). */
export class KafkajsPartitionCounts implements PartitionCountSource {
  private admin: Admin | undefined;

  constructor(private readonly kafka: Kafka) {}

  async partitionCount(topic: string): Promise<number> {
    this.admin ??= this.kafka.admin({ retry: { retries: 1, initialRetryTime: 100, maxRetryTime: 1_000 } });
    const admin = this.admin;
    await guardLibraryCall('kafkajs', 'admin.connect', () => admin.connect());
    const { topics } = await guardLibraryCall('kafkajs', 'admin.fetchTopicMetadata', () => admin.fetchTopicMetadata({ topics: [topic] }));
    return topics.find((t) => t.name === topic)?.partitions.length ?? 0;
  }

  // kafkajs reconnects the admin client on the next connect().
  async close(): Promise<void> {
    await this.admin?.disconnect().catch(() => undefined);
    this.admin = undefined;
  }
}

/** UNKNOWN_TOPIC_OR_PARTITION, also inside kafkajs' "retries exceeded" wrapper. */
function isUnknownTopic(error: unknown, depth = 0): boolean {
  if (!error || typeof error !== 'object' || depth > 5) return false;
  const e = error as { type?: unknown; originalError?: unknown; cause?: unknown };
  return e.type === 'UNKNOWN_TOPIC_OR_PARTITION' || isUnknownTopic(e.originalError, depth + 1) || isUnknownTopic(e.cause, depth + 1);
}

/**
 * Partition counts of topics, for the relay's own partitioning (./partitioner.ts), and
 * which topics are missing since when.
 *
 * A topic the metadata does not know is first asked for through `create` (a producer
 * metadata request that lets a broker with auto.create.topics.enable create it, as
 * producing to it would); only when that fails too is it missing. The caller decides what
 * a missing topic means (./publishBatch.ts: wait a bounded time, then dead-letter).
 */
export class TopicMetadata {
  private readonly known = new Map<string, { partitions: number; atMs: number }>();
  private readonly missing = new Map<string, { sinceMs: number; checkedAtMs: number; cause: unknown }>();
  private readonly lookups = new Map<string, Promise<number | Error>>();
  private readonly maxAgeMs: number;
  private readonly missingRecheckMs: number;
  private readonly now: () => number;

  constructor(
    private readonly source: PartitionCountSource,
    private readonly create: (topic: string) => Promise<void>,
    options: TopicMetadataOptions = {},
  ) {
    this.maxAgeMs = options.maxAgeMs ?? 60_000;
    this.missingRecheckMs = options.missingRecheckMs ?? 1_000;
    this.now = options.now ?? Date.now;
  }

  /** Partition count of each topic, or why it has none: a {@link TopicMissingError}, or the error that kept the answer from coming. */
  async partitions(topics: Iterable<string>): Promise<Map<string, number | Error>> {
    const unique = [...new Set(topics)];
    const answers = await Promise.all(unique.map((t) => this.lookup(t)));
    return new Map(unique.map((t, i) => [t, answers[i]!]));
  }

  /** Forget what is known of a topic (a send found it gone or its metadata stale). */
  forget(topic: string): void {
    this.known.delete(topic);
  }

  async close(): Promise<void> {
    await this.source.close().catch(() => undefined);
  }

  private lookup(topic: string): Promise<number | Error> {
    const now = this.now();
    const known = this.known.get(topic);
    if (known && now - known.atMs < this.maxAgeMs) return Promise.resolve(known.partitions);
    const missing = this.missing.get(topic);
    if (missing && now - missing.checkedAtMs < this.missingRecheckMs) {
      return Promise.resolve(new TopicMissingError(topic, missing.sinceMs, missing.cause));
    }
    let pending = this.lookups.get(topic);
    if (!pending) {
      pending = this.fetch(topic).finally(() => this.lookups.delete(topic));
      this.lookups.set(topic, pending);
    }
    return pending;
  }

  private async fetch(topic: string): Promise<number | Error> {
    try {
      return await this.fetchCount(topic);
    } catch (error) {
      if (!isUnknownTopic(error)) return this.failed(error);
    }
    try {
      await this.create(topic);
      return await this.fetchCount(topic);
    } catch (error) {
      if (!isUnknownTopic(error)) return this.failed(error);
      const now = this.now();
      const sinceMs = this.missing.get(topic)?.sinceMs ?? now;
      this.missing.set(topic, { sinceMs, checkedAtMs: now, cause: error });
      this.known.delete(topic);
      return new TopicMissingError(topic, sinceMs, error);
    }
  }

  private async fetchCount(topic: string): Promise<number> {
    const partitions = await this.source.partitionCount(topic);
    if (partitions < 1) throw Object.assign(new Error(`topic ${topic} has no partitions yet`), { type: 'UNKNOWN_TOPIC_OR_PARTITION' });
    this.known.set(topic, { partitions, atMs: this.now() });
    this.missing.delete(topic);
    return partitions;
  }

  // A connection problem or the like: the answer is the error.
  private failed(error: unknown): Error {
    return error instanceof Error ? error : new Error(String(error));
  }
}
