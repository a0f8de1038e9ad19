import { createRequire } from 'node:module';
import type { ConnectionPool, Connection } from '@platformatic/kafka';
import { OutboxError } from '../shared/errors.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import { PLATFORMATIC_PACKAGE } from './platformaticPackage.js';
import { platformaticClientOptions } from './platformaticProducer.js';
import type { ProgressReader } from './progressReader.js';
import type { ResolvedRelayOptions } from './options.js';
import { innermost, kafkaErrorType } from './publishErrors.js';
import { transactionRetryDelayMs } from './transactionRetry.js';

/**
 * Answers that mean "the transaction is busy, again in a moment" to a TxnOffsetCommit.
 * UNKNOWN_TOPIC_OR_PARTITION: the progress topic was just created and the group
 * coordinator's broker does not know it yet (the 3-node cluster, a relay's first batches:
 * 8 batches failed on it in one bench run, and the circuit breaker opened once).
 */
const BUSY = new Set(['COORDINATOR_LOAD_IN_PROGRESS', 'CONCURRENT_TRANSACTIONS', 'UNKNOWN_TOPIC_OR_PARTITION']);
/** With transactionRetryDelayMs, about 4 s in all. */
const BUSY_RETRIES = 12;

/** Which transaction a progress commit belongs to: its producer's id and epoch. */
export interface TransactionOwner {
  transactionalId: string;
  producerId: bigint;
  producerEpoch: number;
}

/**
 * Writes a unit's progress (./progress.ts) into the open transaction of a
 * @platformatic/kafka producer, as a TxnOffsetCommit whose metadata is the progress:
 * the same record the kafkajs unit writes with sendOffsets. The client's own
 * `Transaction.addOffset` commits a consumed message's offset and sends no metadata, so
 * this sends the request itself, with the package's TxnOffsetCommit v3 (KIP-447: a
 * generation of -1 and no member, as for a producer that is no group member), to the
 * group's coordinator, through a connection pool of its own (SASL and TLS as configured).
 * The caller adds the group to the transaction first (AddOffsetsToTxn). One per relay,
 * shared by its units: the coordinator is looked up again after any failure.
 */
export class ProgressCommitter {
  private pool: ConnectionPool | undefined;
  private coordinator: { host: string; port: number } | undefined;
  private readonly module = createRequire(import.meta.url)(PLATFORMATIC_PACKAGE) as typeof import('@platformatic/kafka');

  constructor(
    private readonly options: Pick<ResolvedRelayOptions, 'kafkaBrokers' | 'clientId' | 'compression' | 'kafkaSecurity'>,
    private readonly reader: ProgressReader,
    private readonly group: string,
    private readonly topic: string,
  ) {}

  /**
   * Commit `metadata` as the progress of `unit` (partition `unit` of the progress topic) in
   * `owner`'s transaction. Sent while the transaction's records are produced, it can reach
   * the group coordinator while the transaction coordinator still adds their partitions:
   * Kafka then refuses it for a few milliseconds (CONCURRENT_TRANSACTIONS, which it reports
   * as COORDINATOR_LOAD_IN_PROGRESS to this request version), and it is sent again soon.
   */
  async commit(owner: TransactionOwner, unit: number, offset: bigint, metadata: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.commitOnce(owner, unit, offset, metadata);
      } catch (error) {
        const busy = innermost(error).some((e) => BUSY.has(kafkaErrorType(e) ?? ''));
        if (!busy || attempt >= BUSY_RETRIES) throw error;
        await new Promise((resolve) => setTimeout(resolve, transactionRetryDelayMs(undefined, '', attempt)));
      }
    }
  }

  private async commitOnce(owner: TransactionOwner, unit: number, offset: bigint, metadata: string): Promise<void> {
    try {
      const connection = await this.connection();
      const answer = await guardLibraryCall('@platformatic/kafka', 'txnOffsetCommit', () =>
        this.module.txnOffsetCommitV3.api.async(connection, owner.transactionalId, this.group, owner.producerId, owner.producerEpoch, -1, '', null, [
          { name: this.topic, partitions: [{ partitionIndex: unit, committedOffset: offset, committedLeaderEpoch: -1, committedMetadata: metadata }] },
        ]),
      );
      const partition = answer.topics.find((t) => t.name === this.topic)?.partitions.find((p) => p.partitionIndex === unit);
      if (!partition || partition.errorCode !== 0) {
        throw new OutboxError(`Kafka did not take unit ${unit}'s progress (TxnOffsetCommit error code ${partition?.errorCode ?? 'missing'})`, { retriable: true });
      }
    } catch (error) {
      // NOT_COORDINATOR, a broker gone: look the coordinator up again next time.
      this.coordinator = undefined;
      throw error;
    }
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.close().catch(() => undefined);
  }

  private async connection(): Promise<Connection> {
    if (!this.coordinator) this.coordinator = await this.reader.groupCoordinator(this.group);
    if (!this.pool) {
      const { clientId, tls, tlsServerName, sasl, connectTimeout, timeout } = platformaticClientOptions(this.options);
      this.pool = new this.module.ConnectionPool(clientId as string, {
        connectTimeout: connectTimeout as number,
        requestTimeout: timeout as number,
        ...(tls ? { tls, tlsServerName } : {}),
        ...(sasl ? { sasl } : {}),
      } as ConstructorParameters<typeof this.module.ConnectionPool>[1]);
    }
    const pool = this.pool;
    const coordinator = this.coordinator;
    return guardLibraryCall('@platformatic/kafka', 'connectionPool.get', () => pool.get(coordinator));
  }
}
