import { OutboxError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import { BatchProgress, announceCommitted, announceProgressRead, type ExactlyOnceUnit } from './exactlyOnceUnit.js';
import type { PartitionGroup } from './partitioner.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './messageProducer.js';
import { logClientEvents, platformaticClientOptions, platformaticTopicMetadata, refusal, requirePlatformatic, timestampRuns, toPlatformatic, type Client } from './platformaticProducer.js';
import type { ProgressCommitter } from './progressCommit.js';
import { TRANSACTION_RETRIES, transactionRetryDelayMs } from './transactionRetry.js';
import { decodeProgress, encodeProgress } from './progress.js';
import type { ProgressReader } from './progressReader.js';
import { classifyPublishError } from './publishErrors.js';
import type { ResolvedRelayOptions } from './options.js';
import type { TopicMetadata } from './topicMetadata.js';

// The @platformatic/kafka exactly-once unit, the default client's (./exactlyOnceUnit.ts
// says what a unit does): a transactional producer under the unit's id. The progress goes
// as the metadata of a transactional offset commit, as with kafkajs, sent by
// ./progressCommit.ts.

type Transaction = Awaited<ReturnType<Client['beginTransaction']>>;

const guarded = <T>(call: string, fn: () => Promise<T>): Promise<T> => guardLibraryCall('@platformatic/kafka', call, fn);

/** What one unit's producer needs; the names come from ./exactlyOnceSetup.ts. */
export interface PlatformaticUnitOptions {
  client: Pick<ResolvedRelayOptions, 'kafkaBrokers' | 'clientId' | 'compression' | 'kafkaSecurity'>;
  progress: ProgressReader;
  committer: ProgressCommitter;
  unit: number;
  transactionalId: string;
  progressGroup: string;
  transactionTimeoutMs: number;
  maxProgressChars: number;
  logger: Logger;
  onCommitted(): void;
}

/** The highest AddPartitionsToTxn version a client may send: 4 and above are Kafka's broker-to-broker form. */
const CLIENT_ADD_PARTITIONS_MAX_VERSION = 3;

type ApiVersion = { name: string; minVersion: number; maxVersion: number };

/**
 * Keep the client to the client versions of AddPartitionsToTxn. @platformatic/kafka 2.12
 * picks the broker's highest (5 on Kafka 3.9), but versions 4 and above are what brokers
 * send each other (KIP-890), and Kafka authorizes them with CLUSTER_ACTION on the cluster:
 * under ACLs a least-privilege relay gets CLUSTER_AUTHORIZATION_FAILED at every
 * transaction's first send (test/exactlyOnceAcls.integration.test.ts; franz-go had the
 * same bug, twmb/franz-go#609). The client asks for the broker's versions through its
 * exported kListApis; the answer is capped there.
 */
function clientApiVersionsOnly(producer: Client): void {
  const { kListApis } = requirePlatformatic();
  const target = producer as unknown as Record<symbol, (callback: (error: Error | null, apis?: ApiVersion[]) => void) => void>;
  const listApis = target[kListApis]!.bind(producer);
  target[kListApis] = (callback) =>
    listApis((error, apis) =>
      callback(
        error,
        apis?.map((a) => (a.name === 'AddPartitionsToTxn' ? { ...a, maxVersion: Math.min(a.maxVersion, CLIENT_ADD_PARTITIONS_MAX_VERSION) } : a)),
      ),
    );
}

/** One exactly-once unit's transactional producer, on @platformatic/kafka. */
export class PlatformaticUnit implements ExactlyOnceUnit {
  private producer: Client | undefined;
  /** The batch's Kafka transaction, begun by its first send that got through to Kafka. */
  private transaction: Transaction | undefined;
  /** Whether the open transaction has the progress group in it (AddOffsetsToTxn). */
  private offsetsAdded = false;
  /** How many ids the open transaction's last progress commit named. */
  private progressSent = 0;
  /** Partition counts from this unit's producer's own metadata (see PlatformaticProducer). */
  private metadata: TopicMetadata | undefined;
  private readonly batch: BatchProgress;
  /** Closed with its relay: never started again (a restart would fence the unit's next owner). */
  private closed = false;

  constructor(private readonly o: PlatformaticUnitOptions) {
    this.batch = new BatchProgress(o.maxProgressChars);
  }

  get unit(): number {
    return this.o.unit;
  }

  async start(): Promise<number[]> {
    await this.dropProducer();
    this.assertOpen();
    const { Producer } = requirePlatformatic();
    const producer = new Producer({
      ...platformaticClientOptions(this.o.client),
      idempotent: true,
      transactionalId: this.o.transactionalId,
      // The client sends its `timeout` as InitProducerId's transaction timeout (and as a
      // produce request's broker-side wait for acks).
      timeout: this.o.transactionTimeoutMs,
      maxInflights: 1,
      // A new producer: InitProducerId with no id and epoch (-1). The client's default sends
      // 0 and 0, which Kafka takes for a producer of its own to bump and answers with
      // PRODUCER_FENCED once the id has had another producer (every takeover of a unit).
      producerId: -1n,
      producerEpoch: -1,
      // A failed send aborts its transaction, so bounded retries cost no guarantee (the
      // worker retries the batch).
      retries: TRANSACTION_RETRIES,
      retryDelay: transactionRetryDelayMs,
    }) as Client;
    clientApiVersionsOnly(producer);
    logClientEvents(producer, this.o.logger);
    this.producer = producer;
    this.metadata = platformaticTopicMetadata(() => producer);
    try {
      // Beginning a transaction sends InitProducerId under the unit's id, which fences every
      // other producer of it; cancelling ends it here without a request (nothing was added).
      const init = await guarded('producer.beginTransaction', () => producer.beginTransaction());
      await guarded('transaction.cancel', () => init.cancel());
    } catch (error) {
      await this.dropProducer();
      throw refusal(error);
    }
    if (this.closed) {
      await this.dropProducer();
      this.assertOpen();
    }
    const metadata = await this.o.progress.read(this.o.unit);
    this.assertOpen();
    this.batch.reset();
    return announceProgressRead(this.o.unit, decodeProgress(metadata));
  }

  roomFor(rows: number): boolean {
    return this.batch.roomFor(rows);
  }

  beginBatch(): void {
    this.batch.reset();
  }

  async send(messages: readonly RelayMessage[]): Promise<SendResult[]> {
    const producer = this.producer;
    const metadata = this.metadata;
    if (!producer || !metadata) throw new OutboxError(`exactly-once unit ${this.o.unit} is not started`, { retriable: true });
    const counts = await metadata.partitions(messages.map((m) => m.topic));
    this.assertOpen();
    const planned = this.batch.plan(messages, counts);
    const { results, sending, batch, groups } = planned;
    if (sending.length === 0) return results;
    try {
      await this.produce(producer, batch, groups, planned.progress);
    } catch (error) {
      // Kafka aborts the whole transaction: the batch's earlier sends are gone with it.
      const earlier = this.batch.takeSends();
      await this.abort();
      for (const g of groups) metadata.forget(g.topic);
      const refused = refusal(error);
      // The records' own fault: publishBatch isolates them. Anything else fails the batch.
      if (classifyPublishError(refused).class !== 'permanent') throw refused;
      for (const send of earlier) {
        await this.produce(producer, send.batch, send.groups, this.batch.with(send.batch)).catch((e: unknown) => {
          throw refusal(e);
        });
        this.batch.added(send);
      }
      for (const i of sending) results[i] = { acknowledged: false, error: refused };
      return results;
    }
    this.batch.added(planned);
    for (const i of sending) results[i] = { acknowledged: true };
    return results;
  }

  /**
   * Produce one send's messages into the transaction, begun if none is open, with the
   * transaction's `progress` once they are in it; rejects on any failure.
   */
  private async produce(producer: Client, batch: RelayMessage[], groups: PartitionGroup[], progress: readonly number[]): Promise<void> {
    this.assertOpen();
    // The transaction is all or nothing, so a send's messages go together: the client sends
    // one produce request per broker. A partition whose timestamps lie more than 24.8 days
    // apart goes in several requests (timestampRuns), its runs one after another.
    const rounds: ReturnType<typeof toPlatformatic>[][] = [];
    for (const g of groups) {
      const records = g.indexes.map((i) => toPlatformatic(batch[i]!, g.partition));
      timestampRuns(records.map((r) => r.timestamp!)).forEach((run, k) => (rounds[k] ??= []).push(...run.map((j) => records[j]!)));
    }
    if (!this.transaction) {
      this.transaction = await guarded('producer.beginTransaction', () => producer.beginTransaction());
      this.offsetsAdded = false;
      this.progressSent = 0;
    }
    const transaction = this.transaction;
    // The progress goes beside the records, not after them: the progress group joins the
    // transaction first (AddOffsetsToTxn goes to the transaction coordinator, as the
    // records' AddPartitionsToTxn does, and of two at once it refuses one
    // CONCURRENT_TRANSACTIONS), then the progress commit (to the group coordinator) runs
    // while the records are produced. It was a quarter of a steady-load transaction's time.
    if (!this.offsetsAdded) {
      await guarded('transaction.addConsumer', () => transaction.addConsumer({ groupId: this.o.progressGroup } as Parameters<typeof transaction.addConsumer>[0]));
      this.offsetsAdded = true;
    }
    const records = (async () => {
      for (const round of rounds) {
        const answer = await guarded('transaction.send', () => transaction.send({ messages: round, acks: -1 }));
        // Each partition must be in the answer, else the transaction aborts.
        for (const r of round) {
          if (!answer.offsets?.some((o) => o.topic === r.topic && o.partition === r.partition)) {
            throw new OutboxError(`Kafka's answer did not name partition ${r.partition} of ${JSON.stringify(r.topic)}: not sent`, { retriable: true });
          }
        }
      }
    })();
    // Both settle before either's failure is thrown: the transaction is aborted after.
    const [sent, committed] = await Promise.allSettled([records, this.commitProgress(producer, progress)]);
    if (sent.status === 'rejected') throw sent.reason;
    if (committed.status === 'rejected') throw committed.reason;
  }

  /** The transaction's progress, as the metadata of its TxnOffsetCommit (./progressCommit.ts); the last one sent is what commits. */
  private async commitProgress(producer: Client, progress: readonly number[]): Promise<void> {
    const owner = { transactionalId: this.o.transactionalId, producerId: producer.producerId!, producerEpoch: producer.producerEpoch! };
    await this.o.committer.commit(owner, this.o.unit, BigInt(progress[progress.length - 1]!), encodeProgress([...progress]));
    this.progressSent = progress.length;
  }

  async commit(): Promise<void> {
    const producer = this.producer;
    const transaction = this.transaction;
    if (!transaction || !producer) return;
    this.assertOpen();
    const progress = [...this.batch.progress];
    try {
      // Each send committed the progress so far; the last one names every row of the transaction.
      if (this.progressSent !== progress.length) await this.commitProgress(producer, progress);
      await guarded('transaction.commit', () => transaction.commit());
    } catch (error) {
      // The worker starts the unit again, which settles the transaction either way.
      throw refusal(error);
    }
    this.transaction = undefined;
    this.batch.reset();
    this.o.onCommitted();
    announceCommitted(this.o.unit, progress.length, progress);
  }

  /** Abort the open transaction, if any (a failed abort is settled by the unit's next start). */
  private async abort(): Promise<void> {
    const transaction = this.transaction;
    this.transaction = undefined;
    if (transaction) await guarded('transaction.abort', () => transaction.abort()).catch(() => undefined);
  }

  /** A relay that stopped (hard) while this unit's batch was on its way: the batch goes no further. */
  private assertOpen(): void {
    if (this.closed) throw new OutboxError(`exactly-once unit ${this.o.unit} is closed: its relay stopped`, { retriable: false });
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.dropProducer();
  }

  private async dropProducer(): Promise<void> {
    const producer = this.producer;
    const metadata = this.metadata;
    this.producer = undefined;
    this.metadata = undefined;
    this.transaction = undefined;
    this.batch.reset();
    await metadata?.close().catch(() => undefined);
    await (producer?.close(true) as Promise<void> | undefined)?.catch(() => undefined);
  }
}
