import diagnosticsChannel from 'node:diagnostics_channel';
import { OutboxError } from '../shared/errors.js';
import type { RelayMessage } from './message.js';
import type { SendResult } from './messageProducer.js';
import { partitionGroups, type PartitionGroup } from './partitioner.js';
import { encodeProgress, progressPrefixFitting } from './progress.js';

// What the exactly-once units of either client share (docs/exactly-once.md): their
// interface to the worker, the channels the fault suite listens on, and the choice of
// which of a send's messages its progress record can name.

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
const progressRead = diagnosticsChannel.channel(PROGRESS_READ_CHANNEL);

/** Announce the ids a unit's committed progress names (the batch's so far). */
export function announceCommitted(unit: number, count: number, ids: readonly number[]): void {
  if (kafkaCommitted.hasSubscribers) kafkaCommitted.publish({ unit, count, ids });
}

/** The ids a (re)started unit's progress names, as the subscribers left them: what is marked sent. */
export function announceProgressRead(unit: number, ids: number[]): number[] {
  const message = { unit, ids };
  if (progressRead.hasSubscribers) progressRead.publish(message);
  return message.ids;
}

/**
 * One unit's Kafka side in exactly-once mode: a producer under the unit's transactional
 * id. A Postgres batch is one Kafka transaction: its sends (several when it claims more
 * rows within the transaction interval, or publishBatch isolates a refused record) go into
 * it, and {@link ExactlyOnceUnit.commit} ends it with the unit's progress (./progress.ts:
 * the ids of every row in it), so a read_committed reader sees the messages if and only if
 * the progress says they are out. The worker (workerLoop.ts) runs a unit's batches one
 * after the other and marks a batch's rows sent in Postgres only after its Kafka commit:
 * at most one batch of a unit is in Kafka and not yet marked sent, and the progress names
 * exactly its rows. ./transactionalUnit.ts (kafkajs) and ./platformaticUnit.ts implement it.
 */
export interface ExactlyOnceUnit {
  readonly unit: number;
  /**
   * (Re)start under the unit's transactional id and read its progress. InitProducerId
   * fences every other producer of the id (a relay that lost the unit, or this one's
   * previous producer) and makes the coordinator finish its open transaction first, so
   * the progress read after it is final. Returns the ids the unit's last committed
   * transaction published: the caller marks them sent before it claims anything.
   */
  start(): Promise<number[]>;
  /** A new Postgres batch begins: its transaction starts empty (nothing may be open). */
  beginBatch(): void;
  /**
   * Publish `messages` into the batch's Kafka transaction (begun by the first send), not
   * yet committed. Answers per message as {@link MessageProducer.send} does: a message
   * Kafka refuses for good (too large, say) refuses the whole send, reported on every
   * message of it, and publishBatch then sends them one at a time. Kafka aborts the
   * transaction with it, so the unit produces the batch's earlier sends again in a new
   * one before it answers. Anything else that fails (a send, fencing) rejects: the batch
   * rolls back, and the worker starts the unit again before its next claim.
   */
  send(messages: readonly RelayMessage[]): Promise<SendResult[]>;
  /**
   * Commit the batch's Kafka transaction with its progress (nothing to do when no send
   * got through). Rejects when the commit failed or may not have happened: the batch
   * rolls back and the unit is started again, which settles the transaction either way.
   */
  commit(): Promise<void>;
  /**
   * Whether the open transaction's progress record likely has room for `rows` more ids
   * (an estimate from the ids it names so far). A batch claims again within the
   * transaction only when it does: rows claimed beyond the record's room would wait,
   * claimed for nothing, for the next batch.
   */
  roomFor(rows: number): boolean;
  /** Disconnect for good (the relay stops): a later start() refuses. */
  close(): Promise<void>;
}

/** A send's messages did not all fit the transaction's progress record: the rest wait for the next batch. */
export class ProgressFullError extends OutboxError {
  constructor(sent: number, left: number) {
    super(`the progress record of this Kafka transaction takes ${sent} more ids; ${left} rows wait for the next batch`, { retriable: true, context: { sent, left } });
  }
}

/** What one transaction of a send carries. */
export interface PlannedSend {
  /** Per message: set for those refused before sending (unknown topic, no room in the progress). */
  results: SendResult[];
  /** Indexes (into the send's messages) of those in the transaction, in id order. */
  sending: number[];
  /** The transaction's messages, `sending`'s, and their groups by partition (indexes into `batch`). */
  batch: RelayMessage[];
  groups: PartitionGroup[];
  /** The progress the transaction commits: the batch's ids so far and these, sorted. */
  progress: number[];
}

/**
 * The ids a unit's open Kafka transaction holds, the sends that put them there (produced
 * again when Kafka aborts the transaction over a refused record), and which messages of
 * the next send its progress record can name within `maxChars` (offset.metadata.max.bytes).
 */
export class BatchProgress {
  private ids: number[] = [];
  private sends: Array<{ batch: RelayMessage[]; groups: PartitionGroup[] }> = [];

  constructor(private readonly maxChars: number) {}

  reset(): void {
    this.ids = [];
    this.sends = [];
  }

  /** See {@link ExactlyOnceUnit.roomFor}: the record's length so far, and as many more ids at its average length per id, with a tenth to spare. */
  roomFor(rows: number): boolean {
    if (this.ids.length === 0) return true;
    const used = encodeProgress(this.ids).length;
    const perId = Math.max(used / this.ids.length, 4 / 3);
    return used + rows * perId * 1.1 <= this.maxChars;
  }

  /** The ids the transaction's progress names, sorted. */
  get progress(): readonly number[] {
    return this.ids;
  }

  /** After a send got through: its messages are in the transaction, and the progress names them. */
  added(send: { batch: RelayMessage[]; groups: PartitionGroup[] }): void {
    this.ids = this.with(send.batch);
    this.sends.push({ batch: send.batch, groups: send.groups });
  }

  /** The progress once `batch` (a send of the transaction) is in it. */
  with(batch: readonly RelayMessage[]): number[] {
    return mergeSorted(this.ids, batch.map((m) => m.id).sort((a, b) => a - b));
  }

  /** The transaction was aborted: what it held, to produce again in the next one, and nothing held now. */
  takeSends(): Array<{ batch: RelayMessage[]; groups: PartitionGroup[] }> {
    const sends = this.sends;
    this.reset();
    return sends;
  }

  /** Which of `messages` one transaction carries, given the topics' partition counts. */
  plan(messages: readonly RelayMessage[], counts: ReadonlyMap<string, number | Error>): PlannedSend {
    const results: SendResult[] = new Array(messages.length);
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
    const batch = sending.map((i) => messages[i]!);
    const groups = partitionGroups(batch, counts, () => undefined);
    const progress = mergeSorted(this.ids, batch.map((m) => m.id).sort((a, b) => a - b));
    return { results, sending, batch, groups, progress };
  }

  /** How many of `ids` (this send's, in id order) the progress record can add to the batch's. */
  private fitting(ids: number[]): number {
    const all = (k: number): number[] => mergeSorted(this.ids, ids.slice(0, k).sort((a, b) => a - b));
    if (progressPrefixFitting(all(ids.length), this.maxChars) === this.ids.length + ids.length) return ids.length;
    let low = 0;
    let high = ids.length;
    while (low < high) {
      const mid = Math.ceil((low + high) / 2);
      if (progressPrefixFitting(all(mid), this.maxChars) === this.ids.length + mid) low = mid;
      else high = mid - 1;
    }
    return low;
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
