import { Partitioners, type Kafka, type Producer, type Transaction } from 'kafkajs';
import type { ProgressReader } from './progressReader.js';
import { OutboxError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './messageProducer.js';
import { classifyPublishError } from './publishErrors.js';
import { COMPRESSION, toKafkajs, unanswered } from './producer.js';
import { decodeProgress, encodeProgress } from './progress.js';
import type { TopicMetadata } from './topicMetadata.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import { BatchProgress, announceCommitted, announceProgressRead, type ExactlyOnceUnit } from './exactlyOnceUnit.js';
import type { PartitionGroup } from './partitioner.js';

export { KAFKA_COMMITTED_CHANNEL, PROGRESS_READ_CHANNEL, ProgressFullError } from './exactlyOnceUnit.js';

// The kafkajs exactly-once unit (./exactlyOnceUnit.ts says what a unit does): a kafkajs
// producer under the unit's transactional id; the progress goes as the metadata of a
// transactional offset commit (sendOffsets).

/** Every call into kafkajs: nothing it throws from its callbacks escapes (../shared/libraryGuard.ts). */
const guarded = <T>(call: string, fn: () => Promise<T>): Promise<T> => guardLibraryCall('kafkajs', call, fn);

/** What one unit's producer needs; the names come from ./exactlyOnceNames.ts. */
export interface TransactionalUnitOptions {
  kafka: Kafka;
  /** Reads the progress back (OffsetFetch, require_stable); shared by a relay's units. */
  progress: ProgressReader;
  /** Partition counts, shared by a relay's units. */
  metadata: TopicMetadata;
  unit: number;
  transactionalId: string;
  progressGroup: string;
  progressTopic: string;
  transactionTimeoutMs: number;
  compression: keyof typeof COMPRESSION;
  /** Longest progress string the brokers keep (offset.metadata.max.bytes). */
  maxProgressChars: number;
  logger: Logger;
  /** Called at each commit; the relay logs its adapter once, as the at-least-once adapters do (./messageProducer.ts). */
  onCommitted(): void;
}

/** One exactly-once unit's transactional producer, on kafkajs. */
export class TransactionalUnit implements ExactlyOnceUnit {
  private producer: Producer | undefined;
  /** The batch's Kafka transaction, begun by its first send that got through to Kafka. */
  private transaction: Transaction | undefined;
  private readonly batch: BatchProgress;
  /** Closed with its relay: never started again (a restart would fence the unit's next owner). */
  private closed = false;

  constructor(private readonly o: TransactionalUnitOptions) {
    this.batch = new BatchProgress(o.maxProgressChars);
  }

  get unit(): number {
    return this.o.unit;
  }

  async start(): Promise<number[]> {
    await this.dropProducer();
    this.assertOpen();
    const producer = this.o.kafka.producer({
      transactionalId: this.o.transactionalId,
      transactionTimeout: this.o.transactionTimeoutMs,
      maxInFlightRequests: 1,
      createPartitioner: Partitioners.DefaultPartitioner,
      allowAutoTopicCreation: false,
      // A failed send aborts its transaction, so bounded retries cost no guarantee; the
      // batch is retried by the worker. The first retry soon: Kafka answers a transaction's
      // first partitions CONCURRENT_TRANSACTIONS while the previous commit's markers are
      // still being written, nearly every time a unit begins its next transaction at once,
      // and kafkajs' default first retry (300 ms) was most of a batch's time (docs/benchmarks.md,
      // History 2026-12-03 14:57).
      retry: { retries: 8, initialRetryTime: 10, maxRetryTime: 1_000 },
    });
    this.producer = producer;
    try {
      await guarded('producer.connect', () => producer.connect());
      // An empty transaction: kafkajs sends InitProducerId at the first one, and nothing else.
      const init = await guarded('producer.transaction', () => producer.transaction());
      await guarded('transaction.abort', () => init.abort());
    } catch (error) {
      await producer.disconnect().catch(() => undefined);
      throw error;
    }
    if (this.closed) {
      // close() ran meanwhile and disconnected it, or it connected again after that.
      await producer.disconnect().catch(() => undefined);
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
    if (!producer) throw new OutboxError(`exactly-once unit ${this.o.unit} is not started`, { retriable: true });
    const counts = await this.o.metadata.partitions(messages.map((m) => m.topic));
    this.assertOpen();
    const planned = this.batch.plan(messages, counts);
    const { results, sending, batch, groups } = planned;
    if (sending.length === 0) return results;
    try {
      await this.produce(producer, batch, groups);
    } catch (error) {
      // Kafka aborts the whole transaction: the batch's earlier sends are gone with it.
      const earlier = this.batch.takeSends();
      await this.abort();
      for (const g of groups) this.o.metadata.forget(g.topic);
      // The records' own fault: publishBatch isolates them. Anything else fails the batch.
      if (classifyPublishError(error).class !== 'permanent') throw error;
      for (const send of earlier) {
        await this.produce(producer, send.batch, send.groups);
        this.batch.added(send);
      }
      for (const i of sending) results[i] = { acknowledged: false, error };
      return results;
    }
    this.batch.added(planned);
    for (const i of sending) results[i] = { acknowledged: true };
    return results;
  }

  /** Produce one send's messages into the transaction, begun if none is open; rejects on any failure. */
  private async produce(producer: Producer, batch: RelayMessage[], groups: PartitionGroup[]): Promise<void> {
    this.assertOpen();
    this.transaction ??= await guarded('producer.transaction', () => producer.transaction());
    const transaction = this.transaction;
    // One request per partition, as the kafkajs adapter sends (./producer.ts): a kafkajs
    // send to partitions on several brokers that is retried after a leader change skips
    // the partitions that moved to a broker which had already answered, and reports
    // success (a fault run on the 3-node cluster lost rows that way). Each answer must
    // name its partition, else the transaction aborts.
    // One after the other: kafkajs sends AddPartitionsToTxn with each, and concurrent ones
    // of one transaction are refused (CONCURRENT_TRANSACTIONS) and retried.
    for (const g of groups) {
      const answer = await guarded('transaction.sendBatch', () =>
        transaction.sendBatch({
          topicMessages: [{ topic: g.topic, messages: g.indexes.map((i) => toKafkajs(batch[i]!, g.partition)) }],
          acks: -1,
          compression: COMPRESSION[this.o.compression],
        }),
      );
      if (!answer.some((r) => r.topicName === g.topic && r.partition === g.partition && r.errorCode === 0)) throw unanswered(g.topic, g.partition);
    }
  }

  async commit(): Promise<void> {
    const transaction = this.transaction;
    if (!transaction) return;
    this.assertOpen();
    const progress = [...this.batch.progress];
    await guarded('transaction.sendOffsets', () =>
      transaction.sendOffsets({
        consumerGroupId: this.o.progressGroup,
        topics: [{ topic: this.o.progressTopic, partitions: [{ partition: this.o.unit, offset: String(progress[progress.length - 1]!), metadata: encodeProgress(progress) } as { partition: number; offset: string }] }],
      }),
    );
    await guarded('transaction.commit', () => transaction.commit());
    this.transaction = undefined;
    this.batch.reset();
    this.o.onCommitted();
    // The ids the committed progress names: the fault suite logs them to find which
    // transaction first carried a row that later went out twice (docs/faults.md, finding 6).
    announceCommitted(this.o.unit, progress.length, progress);
  }

  /** Abort the open transaction, if any; a failed abort leaves it to the unit's next start. */
  private async abort(): Promise<void> {
    const transaction = this.transaction;
    this.transaction = undefined;
    if (transaction) await guarded('transaction.abort', () => transaction.abort());
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
    this.producer = undefined;
    this.transaction = undefined;
    this.batch.reset();
    await producer?.disconnect().catch(() => undefined);
  }
}
