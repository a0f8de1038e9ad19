import diagnosticsChannel from 'node:diagnostics_channel';
import { Partitioners, type Kafka, type Producer } from 'kafkajs';
import type { ProgressReader } from './progressReader.js';
import { OutboxError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './messageProducer.js';
import { partitionGroups } from './partitioner.js';
import { classifyPublishError } from './publishErrors.js';
import { COMPRESSION, toKafkajs, unanswered } from './producer.js';
import { decodeProgress, encodeProgress, progressPrefixFitting } from './progress.js';
import type { TopicMetadata } from './topicMetadata.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';

// One unit's Kafka side in exactly-once mode (docs/exactly-once.md): a kafkajs producer
// under the unit's transactional id. Every send is one Kafka transaction holding the
// messages and the unit's progress (./progress.ts: the ids published so far by the
// Postgres batch the send belongs to), so a read_committed reader sees the messages if
// and only if the progress says they are out. The worker (workerLoop.ts) publishes a
// unit's batches one after the other, and begins a Kafka transaction only after the
// previous batch's Postgres COMMIT, or after start(): so at most one batch is in Kafka
// and not yet marked sent, and the progress names exactly its rows.

/**
 * Channel on which a unit announces, synchronously, each Kafka transaction it committed,
 * before the batch's Postgres COMMIT: where the fault suite's relays kill themselves
 * (the window exactly-once mode closes).
 */
export const KAFKA_COMMITTED_CHANNEL = 'outbox-relay:kafka-committed';
/**
 * Channel on which a unit announces the ids its progress names when it (re)starts, before
 * the relay marks them sent. The message's `ids` are what is marked: the fault suite's
 * planted bug empties them (test/faults/relayHooks.ts), which no subscriber should.
 */
export const PROGRESS_READ_CHANNEL = 'outbox-relay:progress-read';

const kafkaCommitted = diagnosticsChannel.channel(KAFKA_COMMITTED_CHANNEL);
/** Every call into kafkajs: nothing it throws from its callbacks escapes (../shared/libraryGuard.ts). */
const guarded = <T>(call: string, fn: () => Promise<T>): Promise<T> => guardLibraryCall('kafkajs', call, fn);
const progressRead = diagnosticsChannel.channel(PROGRESS_READ_CHANNEL);

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

/** A send's messages did not all fit one progress record: the rest wait for the next send. */
export class ProgressFullError extends OutboxError {
  constructor(sent: number, left: number) {
    super(`the progress record of this Kafka transaction holds ${sent} ids; ${left} rows wait for the next one`, { retriable: true, context: { sent, left } });
  }
}

/** One exactly-once unit's transactional producer. */
export class TransactionalUnit {
  private producer: Producer | undefined;
  /** Ids the current Postgres batch has in committed Kafka transactions, sorted. */
  private batchIds: number[] = [];
  /** Closed with its relay: never started again (a restart would fence the unit's next owner). */
  private closed = false;

  constructor(private readonly o: TransactionalUnitOptions) {}

  get unit(): number {
    return this.o.unit;
  }

  /**
   * (Re)start under the unit's transactional id and read its progress. InitProducerId
   * fences every other producer of the id (a relay that lost the unit, or this one's
   * previous producer) and makes the coordinator finish its open transaction first, so
   * the progress read after it is final. Returns the ids the unit's last committed
   * transaction published: the caller marks them sent before it claims anything.
   */
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
    this.batchIds = [];
    const message = { unit: this.o.unit, ids: decodeProgress(metadata) };
    if (progressRead.hasSubscribers) progressRead.publish(message);
    return message.ids;
  }

  /** A new Postgres batch begins: its sends' progress starts empty. */
  beginBatch(): void {
    this.batchIds = [];
  }

  /**
   * Publish `messages` in one Kafka transaction with the batch's progress. Answers per
   * message as {@link MessageProducer.send} does: a message Kafka refuses for good (too
   * large, say) refuses the whole transaction, reported on every message of it, and
   * publishBatch then sends them one at a time. Anything else that fails (the
   * transaction, its commit, fencing) rejects: the batch rolls back, and the worker
   * starts the unit again before its next claim, since the commit may have happened.
   */
  async send(messages: readonly RelayMessage[]): Promise<SendResult[]> {
    const producer = this.producer;
    if (!producer) throw new OutboxError(`exactly-once unit ${this.o.unit} is not started`, { retriable: true });
    const results: SendResult[] = new Array(messages.length);
    const counts = await this.o.metadata.partitions(messages.map((m) => m.topic));
    this.assertOpen();
    const known: number[] = [];
    partitionGroups(messages, counts, (i, error) => (results[i] = { acknowledged: false, error })).forEach((g) => known.push(...g.indexes));
    known.sort((a, b) => a - b);
    // Messages come in id order; a prefix keeps each key's order when not all fit.
    const fitting = this.fitting(known.map((i) => messages[i]!.id));
    if (fitting < known.length) {
      const full = new ProgressFullError(fitting, known.length - fitting);
      for (const i of known.slice(fitting)) results[i] = { acknowledged: false, error: full };
    }
    const sending = known.slice(0, fitting);
    if (sending.length === 0) return results;
    const batch = sending.map((i) => messages[i]!);
    const groups = partitionGroups(batch, counts, () => undefined);
    const progress = mergeSorted(this.batchIds, batch.map((m) => m.id).sort((a, b) => a - b));

    const transaction = await guarded('producer.transaction', () => producer.transaction());
    // One request per partition, as the kafkajs adapter sends (./producer.ts): a kafkajs
    // send to partitions on several brokers that is retried after a leader change skips
    // the partitions that moved to a broker which had already answered, and reports
    // success (a fault run on the 3-node cluster lost rows that way). Each answer must
    // name its partition, else the transaction aborts.
    // One after the other: kafkajs sends AddPartitionsToTxn with each, and concurrent ones
    // of one transaction are refused (CONCURRENT_TRANSACTIONS) and retried.
    const sent: PromiseSettledResult<void>[] = [];
    for (const g of groups) {
      try {
        const answer = await guarded('transaction.sendBatch', () =>
          transaction.sendBatch({
            topicMessages: [{ topic: g.topic, messages: g.indexes.map((i) => toKafkajs(batch[i]!, g.partition)) }],
            acks: -1,
            compression: COMPRESSION[this.o.compression],
          }),
        );
        if (!answer.some((r) => r.topicName === g.topic && r.partition === g.partition && r.errorCode === 0)) throw unanswered(g.topic, g.partition);
        sent.push({ status: 'fulfilled', value: undefined });
      } catch (error) {
        sent.push({ status: 'rejected', reason: error });
        break;
      }
    }
    const failed = sent.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      const error: unknown = failed.reason;
      await guarded('transaction.abort', () => transaction.abort());
      for (const g of groups) this.o.metadata.forget(g.topic);
      // The records' own fault: publishBatch isolates them. Anything else fails the batch.
      if (classifyPublishError(error).class !== 'permanent') throw error;
      for (const i of sending) results[i] = { acknowledged: false, error };
      return results;
    }
    this.assertOpen();
    await guarded('transaction.sendOffsets', () =>
      transaction.sendOffsets({
        consumerGroupId: this.o.progressGroup,
        topics: [{ topic: this.o.progressTopic, partitions: [{ partition: this.o.unit, offset: String(progress[progress.length - 1]!), metadata: encodeProgress(progress) } as { partition: number; offset: string }] }],
      }),
    );
    await guarded('transaction.commit', () => transaction.commit());
    this.batchIds = progress;
    this.o.onCommitted();
    for (const i of sending) results[i] = { acknowledged: true };
    // The ids the committed progress names (the batch's so far): the fault suite logs them to
    // find which transaction first carried a row that later went out twice (docs/faults.md, finding 6).
    if (kafkaCommitted.hasSubscribers) kafkaCommitted.publish({ unit: this.o.unit, count: sending.length, ids: progress });
    return results;
  }

  /** How many of `ids` (this send's, in id order) the progress record can add to the batch's. */
  private fitting(ids: number[]): number {
    const all = (k: number): number[] => mergeSorted(this.batchIds, ids.slice(0, k).sort((a, b) => a - b));
    if (progressPrefixFitting(all(ids.length), this.o.maxProgressChars) === this.batchIds.length + ids.length) return ids.length;
    let low = 0;
    let high = ids.length;
    while (low < high) {
      const mid = Math.ceil((low + high) / 2);
      if (progressPrefixFitting(all(mid), this.o.maxProgressChars) === this.batchIds.length + mid) low = mid;
      else high = mid - 1;
    }
    return low;
  }

  /** A relay that stopped (hard) while this unit's batch was on its way: the batch goes no further. */
  private assertOpen(): void {
    if (this.closed) throw new OutboxError(`exactly-once unit ${this.o.unit} is closed: its relay stopped`, { retriable: false });
  }

  /** Disconnect for good (the relay stops): a later start() refuses. */
  async close(): Promise<void> {
    this.closed = true;
    await this.dropProducer();
  }

  private async dropProducer(): Promise<void> {
    const producer = this.producer;
    this.producer = undefined;
    await producer?.disconnect().catch(() => undefined);
  }
}

function mergeSorted(a: readonly number[], b: readonly number[]): number[] {
  const out: number[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const next = j >= b.length || (i < a.length && a[i]! <= b[j]!) ? a[i++]! : b[j++]!;
    if (out[out.length - 1] !== next) out.push(next);
  }
  return out;
}
