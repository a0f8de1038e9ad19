import { createRequire } from 'node:module';
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import type { Producer as PltProducer, ProducerOptions as PltProducerOptions, MessageToProduce } from '@platformatic/kafka';
import { ConfigError, OutboxError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { RelayMessage } from './message.js';
import { partitionGroups } from './partitioner.js';
import type { MessageProducer, SendResult } from './messageProducer.js';
import { missingPackage, PLATFORMATIC_PACKAGE } from './platformaticPackage.js';
import { kafkaErrorType } from './publishErrors.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import { TopicMetadata, TopicMissingError, type PartitionCountSource } from './topicMetadata.js';
import type { ResolvedRelayOptions } from './options.js';
import { traceRequest } from '../shared/tracing.js';

export { PLATFORMATIC_PACKAGE, assertPlatformaticInstalled } from './platformaticPackage.js';

type Buffers = MessageToProduce<Buffer, Buffer, Buffer, Buffer>;
/** The package's producer, on bytes. */
export type Client = PltProducer<Buffer, Buffer, Buffer, Buffer>;
/** The package's module. */
export type PlatformaticModule = typeof import('@platformatic/kafka');

/**
 * Loads the package synchronously (require of an ES module, Node >= 20.19). Not a
 * dynamic import at the first send: evaluating the package takes 1.5-3 s of one core on
 * a loaded machine (measured: 1.6 s under node, 3.3 s under tsx, with the machine's
 * other load), all of it blocking the event loop, and at the first send the relay holds
 * shard leases whose renewals would then be late (a fault run with a 2.5 s lease lost
 * them that way). Loaded when the adapter is created, before the relay's loops start,
 * it blocks a relay that holds nothing yet.
 */
export function requirePlatformatic(): PlatformaticModule {
  return createRequire(import.meta.url)(PLATFORMATIC_PACKAGE) as PlatformaticModule;
}

/** What the platformatic adapter reads of the relay's options. */
export type PlatformaticProducerOptions = Pick<ResolvedRelayOptions, 'kafkaBrokers' | 'clientId' | 'compression' | 'kafkaSecurity'> & {
  /** Where the client's connection events go (component `platformatic-kafka`), as kafkajs' logs do. */
  logger?: Logger;
};

/**
 * The client options for the relay's settings: acks=all, no idempotence (as with kafkajs:
 * a key is never in two sends at once), no automatic topic creation on send (the
 * metadata asks for it once, as the kafkajs adapter does), TLS and SASL as configured.
 * Retries are bounded like the kafkajs client's (3, from 200 ms doubling to at most
 * 2 s); the relay retries whole batches with its own backoff on top.
 */
export function platformaticClientOptions(o: PlatformaticProducerOptions): PltProducerOptions<Buffer, Buffer, Buffer, Buffer> {
  const { ssl, sasl } = o.kafkaSecurity;
  return {
    clientId: o.clientId,
    bootstrapBrokers: o.kafkaBrokers,
    acks: -1,
    idempotent: false,
    autocreateTopics: false,
    compression: o.compression,
    connectTimeout: 3_000,
    // Requests in flight per broker connection (the client's default is 5): a relay has
    // batchesInFlight × partitions one-partition requests out at once, all to the leader
    // of each partition; kafkajs does not limit them. Safe for order: a key is never in two
    // requests at once (see ./producer.ts).
    maxInflights: 64,
    // kafkajs' requestTimeout, and the produce request's broker-side timeout.
    timeout: 30_000,
    retries: 3,
    retryDelay: retryDelayMs,
    ...(ssl ? { tls: ssl === true ? {} : (ssl as TlsOptions), tlsServerName: true } : {}),
    ...(sasl ? { sasl: saslOptions(sasl) } : {}),
  };
}

/**
 * Delay before a retry of the client's own. A metadata request that failed (the
 * usual case: a topic that does not exist yet) is retried sooner, as kafkajs' admin is,
 * so that a missing topic is known as such in well under a second.
 */
export function retryDelayMs(_client: unknown, operationId: string, attempt: number): number {
  const base = operationId === 'metadata' ? 100 : 200;
  return Math.min(base * 2 ** Math.max(0, attempt - 1), 2_000);
}

type SaslIn = NonNullable<ResolvedRelayOptions['kafkaSecurity']['sasl']>;

function saslOptions(sasl: SaslIn): NonNullable<PltProducerOptions<Buffer, Buffer, Buffer, Buffer>['sasl']> {
  const { mechanism, username, password } = sasl as { mechanism: string; username: string; password: string };
  // Ours are lower case (kafkajs' spelling); platformatic's are Kafka's.
  const names: Record<string, 'PLAIN' | 'SCRAM-SHA-256' | 'SCRAM-SHA-512'> = { plain: 'PLAIN', 'scram-sha-256': 'SCRAM-SHA-256', 'scram-sha-512': 'SCRAM-SHA-512' };
  const name = names[mechanism.toLowerCase()];
  if (!name) throw new ConfigError('kafkaSaslMechanism', `${JSON.stringify(mechanism)} is not supported by the platformatic producer`);
  return { mechanism: name, username, password };
}

/** One relay message as platformatic's (bytes everywhere: its noop serializers take Buffers). */
export function toPlatformatic(m: RelayMessage, partition: number): Buffers {
  const headers = new Map<Buffer, Buffer>();
  for (const [name, value] of Object.entries(m.headers)) headers.set(Buffer.from(name, 'utf8'), Buffer.from(value, 'utf8'));
  return {
    topic: m.topic,
    partition,
    key: m.keyBytes ?? Buffer.from(m.key, 'utf8'),
    // null stays null: a tombstone. (The client would take a string's length in
    // characters, not bytes, so strings are encoded here.)
    value: (m.value === null ? null : typeof m.value === 'string' ? Buffer.from(m.value, 'utf8') : m.value) as Buffer,
    headers,
    // No created_at a Kafka timestamp can hold: the send time, as the client itself would
    // stamp it, but known here for timestampRuns.
    timestamp: BigInt(m.timestampMs ?? Date.now()),
  };
}

/** Largest timestamp difference (ms) from a request's first message that the client encodes right. */
export const MAX_TIMESTAMP_DELTA_MS = 2n ** 31n - 1n;

/**
 * A partition's messages (in order) as consecutive runs, one request each, whose
 * timestamps are all within {@link MAX_TIMESTAMP_DELTA_MS} of the run's first: the client
 * writes each record's timestamp as a delta from the first one's, and its 64-bit varint
 * encodes deltas beyond ±2^31 wrong (measured with 1.35: a 1970 timestamp behind one of
 * 2026 reached the broker as -350; 2.12 still does, test/unit/platformaticProducer.test.ts), so a row 25 days older or newer than its request's
 * first would get a wrong Kafka timestamp. Almost always one run.
 */
export function timestampRuns(timestamps: readonly bigint[]): number[][] {
  const runs: number[][] = [];
  let first: bigint | undefined;
  timestamps.forEach((ts, i) => {
    const delta = first === undefined ? 0n : ts - first;
    if (first === undefined || delta > MAX_TIMESTAMP_DELTA_MS || delta < -MAX_TIMESTAMP_DELTA_MS) {
      runs.push([i]);
      first = ts;
    } else {
      runs[runs.length - 1]!.push(i);
    }
  });
  return runs;
}

/**
 * Kafka refused the SASL authentication of the platformatic client. Named so that its
 * metrics label (`kafka_sasl_authentication_error`) is the one kafkajs' failure has.
 */
class KafkaSASLAuthenticationError extends OutboxError {
  constructor(cause: unknown) {
    super(`SASL authentication failed: ${(cause as Error)?.message ?? String(cause)}`, { retriable: true, cause });
  }
}

/** Any error (or one inside it) that is a failed SASL authentication. */
function isAuthenticationFailure(error: unknown, depth = 0): boolean {
  if (!error || typeof error !== 'object' || depth > 5) return false;
  const e = error as { code?: unknown; errors?: unknown; cause?: unknown };
  if (e.code === 'PLT_KFK_AUTHENTICATION' || kafkaErrorType(e) === 'SASL_AUTHENTICATION_FAILED') return true;
  if (Array.isArray(e.errors) && e.errors.some((inner) => isAuthenticationFailure(inner, depth + 1))) return true;
  return isAuthenticationFailure(e.cause, depth + 1);
}

/** What a send tells the relay: the client's error, a SASL failure under one name. */
export function refusal(error: unknown): unknown {
  return isAuthenticationFailure(error) ? new KafkaSASLAuthenticationError(error) : error;
}

type BrokerEvent = { broker?: { host?: string; port?: number } };
const brokerOf = (e: BrokerEvent | undefined): string => `${e?.broker?.host}:${e?.broker?.port}`;

/**
 * The client logs nothing itself (it has `debug` and diagnostics channels): its
 * connection events go through the relay's logger, as kafkajs' own logs do, with the
 * broker's address only (never the connection's options, which hold the SASL password).
 */
export function logClientEvents(client: Client, logger: Logger): void {
  const log = logger.child({ component: 'platformatic-kafka' });
  const on = client.on.bind(client) as (event: string, listener: (...args: unknown[]) => void) => void;
  on('client:broker:connect', (e) => log.debug({ broker: brokerOf(e as BrokerEvent) }, 'connected to broker'));
  on('client:broker:disconnect', (e) => log.debug({ broker: brokerOf(e as BrokerEvent) }, 'disconnected from broker'));
  on('client:broker:failed', (e) => log.warn({ broker: brokerOf(e as BrokerEvent) }, 'connection to broker failed'));
  on('client:performWithRetry:retry', (operation, attempt, retries, delayMs) => log.debug({ operation, attempt, retries, delayMs }, 'retrying'));
}

/**
 * platformatic's metadata answers an unknown topic with a UserError "Unknown topic X."
 * (the protocol error inside is dropped); it is told apart by that message.
 */
export function isPlatformaticUnknownTopic(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | undefined;
  return e?.code === 'PLT_KFK_USER' && typeof e.message === 'string' && e.message.startsWith('Unknown topic ');
}

/** Partition counts from the sending client's own metadata (see the class comment below). */
class PlatformaticPartitionCounts implements PartitionCountSource {
  constructor(private readonly client: () => Client) {}

  async partitionCount(topic: string): Promise<number> {
    const client = this.client();
    try {
      const metadata = await guardLibraryCall('@platformatic/kafka', 'producer.metadata', () => client.metadata({ topics: [topic], forceUpdate: true }));
      return metadata.topics.get(topic)?.partitionsCount ?? 0;
    } catch (error) {
      if (isPlatformaticUnknownTopic(error) || kafkaErrorType(error) === 'UNKNOWN_TOPIC_OR_PARTITION') {
        throw Object.assign(new Error(`topic ${topic} is unknown to Kafka`), { type: 'UNKNOWN_TOPIC_OR_PARTITION', cause: error });
      }
      throw error;
    }
  }

  async close(): Promise<void> {}
}

/**
 * The @platformatic/kafka adapter of {@link MessageProducer} (`producer: 'platformatic'`),
 * with the kafkajs adapter's guarantees (./producer.ts):
 *
 * - acks=all, no idempotence, the relay's own murmur2 partition set on every message;
 * - one `send` per (topic, partition), all at once, so each partition's request is
 *   appended or refused on its own and a refusal re-sends nothing acknowledged (the
 *   client groups a send's messages by leader broker into one request, which would tie
 *   several partitions' fates together); a partition whose messages' timestamps lie more
 *   than 24.8 days apart goes as several requests, one after another ({@link timestampRuns});
 * - a topic the broker does not know is refused with a TopicMissingError without being
 *   sent, by the same ./topicMetadata.ts logic (ask, let the broker auto-create it, ask
 *   again, remember it missing for a second).
 *
 * Partition counts come from this client's own metadata, not from a second client:
 * platformatic reduces every explicit partition modulo the partition count it knows
 * (`partition %= partitionsCount`), so a count read from another client that is ahead of
 * this one's would silently send to another partition. Read from the same cache, the
 * count the relay partitioned by is never above the one the client uses (counts only
 * grow), and the modulo changes nothing.
 *
 * The package is loaded when the adapter is created ({@link requirePlatformatic}): only
 * users who choose it install it.
 */
export class PlatformaticProducer implements MessageProducer {
  readonly adapter = 'platformatic';
  private readonly module: PlatformaticModule | undefined;
  /** Why the package could not be loaded: every send is refused with it. */
  private readonly unavailable: ConfigError | undefined;
  private loaded: Client | undefined;
  private readonly metadata: TopicMetadata;
  private closed = false;
  private announced = false;

  constructor(
    private readonly options: PlatformaticProducerOptions,
    /** Loads the package's module (tests pass another). */
    load: () => PlatformaticModule = requirePlatformatic,
  ) {
    try {
      this.module = load();
    } catch (error) {
      // resolveRelayOptions checked the package is there; if it still cannot be loaded,
      // every batch says so (a ConfigError, naming the setting) rather than start failing.
      this.unavailable = missingPackage(error);
    }
    this.metadata = platformaticTopicMetadata(() => this.client());
  }

  async send(messages: readonly RelayMessage[]): Promise<SendResult[]> {
    const results: SendResult[] = new Array(messages.length);
    const refuse = (indexes: number[], error: unknown): void => {
      for (const i of indexes) results[i] = { acknowledged: false, error };
    };
    let client: Client;
    try {
      client = this.client();
    } catch (error) {
      refuse(messages.map((_, i) => i), refusal(error));
      return results;
    }
    const counts = await this.metadata.partitions(messages.map((m) => m.topic));
    const groups = partitionGroups(messages, counts, (i, error) => refuse([i], error instanceof TopicMissingError ? error : refusal(error)));
    await Promise.all(
      groups.map(async ({ topic, partition, indexes }) => {
        const records = indexes.map((i) => toPlatformatic(messages[i]!, partition));
        // One after another: a run refused refuses the runs after it, unsent, so nothing
        // acknowledged depends on a refused message of its key.
        for (const run of timestampRuns(records.map((r) => r.timestamp!))) {
          const sent = run.map((j) => indexes[j]!);
          try {
            await traceRequest(
              sent.map((i) => messages[i]!),
              topic,
              partition,
              () => guardLibraryCall('@platformatic/kafka', 'producer.send', () => client.send({ messages: run.map((j) => records[j]!), acks: -1 })),
            );
            for (const i of sent) results[i] = { acknowledged: true };
            if (!this.announced) {
              this.announced = true;
              this.options.logger?.info({ producer: this.adapter }, 'producer adapter publishing');
            }
          } catch (error) {
            // Gone, or more partitions than we knew of: look the topic up again next time.
            this.metadata.forget(topic);
            refuse(indexes.slice(run[0]), refusal(error));
            break;
          }
        }
      }),
    );
    return results;
  }

  async disconnect(): Promise<void> {
    this.closed = true;
    await this.metadata.close();
    await (this.loaded?.close(true) as Promise<void> | undefined)?.catch(() => undefined);
  }

  /** The client, created on first use (it connects lazily, on its first request). */
  private client(): Client {
    if (this.loaded) return this.loaded;
    if (!this.module) throw this.unavailable;
    if (this.closed) throw new OutboxError('the producer is disconnected', { retriable: true });
    this.loaded = new this.module.Producer(platformaticClientOptions(this.options)) as Client;
    if (this.options.logger) logClientEvents(this.loaded, this.options.logger);
    return this.loaded;
  }
}

/**
 * Partition counts from `client`'s own metadata (see PlatformaticProducer), and a
 * missing topic asked for once with a metadata request that lets a broker with
 * auto.create.topics.enable create it, as producing to it would; the client retries
 * while the new topic has no leaders yet (LEADER_NOT_AVAILABLE).
 */
export function platformaticTopicMetadata(client: () => Client): TopicMetadata {
  const createTopic = async (topic: string): Promise<void> => {
    const c = client();
    try {
      await guardLibraryCall('@platformatic/kafka', 'producer.metadata', () => c.metadata({ topics: [topic], autocreateTopics: true, forceUpdate: true }));
    } catch (error) {
      if (isPlatformaticUnknownTopic(error)) throw Object.assign(new Error(`topic ${topic} was not created`), { type: 'UNKNOWN_TOPIC_OR_PARTITION', cause: error });
      throw error;
    }
  };
  return new TopicMetadata(new PlatformaticPartitionCounts(client), createTopic);
}
