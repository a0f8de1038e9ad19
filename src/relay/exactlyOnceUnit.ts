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

/** Announce the ids a unit's committed progress names (the batch's so far), and the transactional id that committed it. */
export function announceCommitted(unit: number, transactionalId: string, ids: readonly number[]): void {
  if (kafkaCommitted.hasSubscribers) kafkaCommitted.publish({ unit, transactionalId, count: ids.length, ids });
}

/** The ids a (re)started unit's progress names, as the subscribers left them: what is marked sent. */
export function announceProgressRead(unit: number, ids: number[]): number[] {
  const message = { unit, ids };
  if (progressRead.hasSubscribers) progressRead.publish(message);
  return message.ids;
}

/**
 * One unit's Kafka side in exactly-once mode: two transactional producers under the unit's
 * two transactional ids, which take its transactions in turn (./twoProducerUnit.ts). A
 * Postgres batch is one Kafka transaction ({@link UnitTransaction}): its sends (several
 * when it claims more rows within the transaction interval, or publishBatch isolates a
 * refused record) go into it, and its commit ends it with the unit's progress
 * (./progress.ts: the ids of every row in it), so a read_committed reader sees the
 * messages if and only if the progress says they are out. The worker (./unitBatches.ts)
 * marks a batch's rows sent in Postgres only after its Kafka commit, and commits a
 * batch's transaction only after the previous batch committed in Kafka and in Postgres:
 * at most one batch of a unit is in Kafka and not yet marked sent, and the progress names
 * exactly its rows.
 */
export interface ExactlyOnceUnit {
  readonly unit: number;
  /**
   * (Re)start the producers under the unit's transactional ids and read its progress.
   * InitProducerId fences every other producer of an id (a relay that lost the unit, or
   * this one's previous producers) and makes the coordinator finish its open transaction
   * first, so the progress read after both is final. Returns the ids the unit's last
   * committed transaction published: the caller marks them sent before it claims anything.
   * Never while a transaction of the unit is in flight.
   */
  start(): Promise<number[]>;
  /**
   * The next batch's transaction, on the producer whose turn it is; nothing is sent yet.
   * At most two at once, one per producer: the next may begin while the previous one
   * commits; a third throws.
   */
  begin(): UnitTransaction;
  /** Disconnect for good (the relay stops): a later start() refuses. */
  close(): Promise<void>;
}

/** One batch's Kafka transaction on one of its unit's producers. */
export interface UnitTransaction {
  /**
   * Publish `messages` into the transaction (begun by the first send), not yet committed.
   * Answers per message as {@link MessageProducer.send} does: a message Kafka refuses for
   * good (too large, say) refuses the whole send, reported on every message of it, and
   * publishBatch then sends them one at a time. Kafka aborts the transaction with it, so
   * the producer produces the batch's earlier sends again in a new one before it answers.
   * Anything else that fails (a send, fencing) rejects: the batch rolls back, and the
   * worker starts the unit again before its next claim.
   */
  send(messages: readonly RelayMessage[]): Promise<SendResult[]>;
  /** Make the transaction's progress commit final (kafkajs sends it here): after this only EndTxn goes out. */
  prepareCommit(): Promise<void>;
  /**
   * Commit the transaction with its progress (nothing to do when no send got through).
   * Rejects when the commit failed or may not have happened: the batch rolls back and the
   * unit is started again, which settles the transaction either way.
   */
  commit(): Promise<void>;
  /**
   * Whether the transaction's progress record likely has room for `rows` more ids (an
   * estimate from the ids it names so far). A batch claims again within the transaction
   * only when it does: rows claimed beyond the record's room would wait, claimed for
   * nothing, for the next batch.
   */
  roomFor(rows: number): boolean;
  /** The batch is over (committed or failed): its producer may take another transaction. */
  end(): void;
}

/**
 * One transactional producer of a unit, under one of its two transactional ids:
 * ./transactionalUnit.ts (kafkajs) and ./platformaticUnit.ts implement it. One transaction
 * at a time, as {@link UnitTransaction} says; the unit reads the progress.
 */
export interface UnitProducer {
  /** (Re)start under the id: InitProducerId, which fences the id's other producers and settles its open transaction. */
  start(): Promise<void>;
  /** A new transaction begins: it starts empty (nothing may be open). */
  beginBatch(): void;
  send(messages: readonly RelayMessage[]): Promise<SendResult[]>;
  prepareCommit(): Promise<void>;
  /** Resolves true when a transaction committed, false when none was open. */
  commit(): Promise<boolean>;
  roomFor(rows: number): boolean;
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

  /** See {@link UnitTransaction.roomFor}: the record's length so far, and as many more ids at its average length per id, with a tenth to spare. */
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
