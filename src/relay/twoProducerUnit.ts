import { OutboxError } from '../shared/errors.js';
import { announceProgressRead, type ExactlyOnceUnit, type UnitProducer, type UnitTransaction } from './exactlyOnceUnit.js';
import { decodeProgress } from './progress.js';

/** Reads a unit's committed progress (./progressReader.ts). */
export interface UnitProgressSource {
  read(unit: number): Promise<string | null>;
}

/**
 * An exactly-once unit whose transactions alternate between two transactional producers,
 * one per transactional id of the unit (docs/exactly-once.md, "Two transactional ids per
 * unit").
 *
 * Why two. Kafka answers a transactional id's next transaction CONCURRENT_TRANSACTIONS
 * while the commit markers of its previous one are still being written, and a unit begins
 * its next transaction at once: the first produce request of nearly every transaction
 * waited and was retried; on the 3-node cluster it was the largest step of a transaction
 * at p99 (bench/committed/eos-steps-cluster-2026-12-05). The other id's last transaction
 * ended a whole batch earlier. And with two, the next batch is claimed and produced into
 * one producer's transaction while the other commits (./unitBatches.ts).
 *
 * Both producers commit their progress to the unit's one place in the progress group.
 * Kafka keeps, of two committed transactional offset commits, the one appended later; a
 * transaction's progress commit is final before the next transaction sends anything
 * ({@link UnitTransaction.prepareCommit}), and it commits only after the previous one
 * committed, so the progress names the last committed transaction's rows. A start fences
 * both ids before it reads the progress, so neither can still commit afterwards.
 */
export class TwoProducerUnit implements ExactlyOnceUnit {
  /** Which producer the next transaction goes through. */
  private turn = 0;
  private readonly busy = [false, false];
  private closed = false;

  constructor(
    readonly unit: number,
    private readonly producers: readonly [UnitProducer, UnitProducer],
    private readonly progress: UnitProgressSource,
  ) {}

  async start(): Promise<number[]> {
    this.assertOpen();
    // Both settle before the progress is read: a transaction of either id still open
    // would leave its progress commit pending.
    const started = await Promise.allSettled(this.producers.map((p) => p.start()));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    const metadata = await this.progress.read(this.unit);
    this.assertOpen();
    this.turn = 0;
    this.busy.fill(false);
    return announceProgressRead(this.unit, decodeProgress(metadata));
  }

  begin(): UnitTransaction {
    this.assertOpen();
    // The producer whose turn it is, else the other: a batch that sent nothing did not take its turn.
    const index = !this.busy[this.turn] ? this.turn : !this.busy[1 - this.turn] ? 1 - this.turn : undefined;
    if (index === undefined) {
      throw new OutboxError(`exactly-once unit ${this.unit}: both producers have a transaction in flight`, { retriable: true });
    }
    const producer = this.producers[index]!;
    this.busy[index] = true;
    producer.beginBatch();
    let ended = false;
    return {
      send: (messages) => {
        // The next transaction goes through the other producer once this one is in use.
        this.turn = 1 - index;
        return producer.send(messages);
      },
      prepareCommit: () => producer.prepareCommit(),
      commit: async () => void (await producer.commit()),
      roomFor: (rows) => producer.roomFor(rows),
      end: () => {
        if (ended) return;
        ended = true;
        this.busy[index] = false;
      },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.producers.map((p) => p.close()));
  }

  /** A relay that stopped (hard) while this unit started: nothing is marked from its progress. */
  private assertOpen(): void {
    if (this.closed) throw new OutboxError(`exactly-once unit ${this.unit} is closed: its relay stopped`, { retriable: false });
  }
}
