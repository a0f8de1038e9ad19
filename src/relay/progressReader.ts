import { createRequire } from 'node:module';
import type { Admin as PltAdmin } from '@platformatic/kafka';
import { PLATFORMATIC_PACKAGE } from './platformaticPackage.js';
import { platformaticClientOptions } from './platformaticProducer.js';
import type { ResolvedRelayOptions } from './options.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';

/**
 * Reads a unit's progress back (./progress.ts) with OffsetFetch and `require_stable`
 * (KIP-447): Kafka writes a committed transaction's markers first and materializes its
 * offset commit on the group coordinator afterwards, so a plain OffsetFetch right after
 * InitProducerId can still answer the previous transaction's progress; with
 * `require_stable` the coordinator answers UNSTABLE_OFFSET_COMMIT until it is final, and
 * the client retries. kafkajs 2.2.4 speaks OffsetFetch up to v4, without the flag (a
 * fault run on the 3-node cluster published batches again that way), so this one read
 * goes through @platformatic/kafka's admin client (v8+), whichever adapter publishes.
 */
export class ProgressReader {
  private admin: PltAdmin | undefined;

  constructor(
    private readonly options: Pick<ResolvedRelayOptions, 'kafkaBrokers' | 'clientId' | 'compression' | 'kafkaSecurity'>,
    private readonly group: string,
    private readonly topic: string,
  ) {}

  /**
   * The progress string of `unit`, or null when it has none yet. `stable` false: whatever
   * is committed now, without waiting for an open transaction of the unit to end (the
   * start-up check, which only needs to know the group can be read).
   */
  async read(unit: number, { stable = true }: { stable?: boolean } = {}): Promise<string | null> {
    const admin = this.client();
    const groups = await this.guarded(admin, 'admin.listConsumerGroupOffsets', () =>
      admin.listConsumerGroupOffsets({ groups: [{ groupId: this.group, topics: [{ name: this.topic, partitionIndexes: [unit] }] }], requireStable: stable }),
    );
    const partition = groups.find((g) => g.groupId === this.group)?.topics.find((t) => t.name === this.topic)?.partitions.find((p) => p.partitionIndex === unit);
    return partition?.metadata ?? null;
  }

  /**
   * FindCoordinator for a transactional id: Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
   * without the DESCRIBE permission on it, where kafkajs reports only "Failed to find group
   * coordinator" (the start-up check, ./exactlyOnceSetup.ts).
   */
  async findTransactionCoordinator(transactionalId: string): Promise<void> {
    const admin = this.client();
    await this.guarded(admin, 'admin.findCoordinator', () => admin.findCoordinator({ keyType: 1, keys: [transactionalId] }));
  }

  /** The broker that coordinates `group` (FindCoordinator, key type GROUP): where its progress commits go. */
  async groupCoordinator(group: string): Promise<{ host: string; port: number }> {
    const admin = this.client();
    const [found] = await this.guarded(admin, 'admin.findCoordinator', () => admin.findCoordinator({ keyType: 0, keys: [group] }));
    if (!found) throw new Error(`Kafka named no coordinator for group ${group}`);
    return { host: found.host, port: found.port };
  }

  /**
   * A call into the admin client that nothing escapes (../shared/libraryGuard.ts). After
   * any failure the client is dropped and the next read makes a new one: the client
   * threw from its callbacks after a broker bounce because its cached broker list
   * lacked the group coordinator, and a retry on the same client reads the same list.
   */
  private async guarded<T>(admin: PltAdmin, call: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await guardLibraryCall('@platformatic/kafka', call, fn);
    } catch (error) {
      // Only the client that failed: the units share the reader, and another may have made a new one already.
      if (this.admin === admin) this.admin = undefined;
      await admin.close().catch(() => undefined);
      throw error;
    }
  }

  async close(): Promise<void> {
    const admin = this.admin;
    this.admin = undefined;
    await admin?.close().catch(() => undefined);
  }

  private client(): PltAdmin {
    if (!this.admin) {
      const { Admin } = createRequire(import.meta.url)(PLATFORMATIC_PACKAGE) as typeof import('@platformatic/kafka');
      const { clientId, bootstrapBrokers, tls, tlsServerName, sasl, retries, retryDelay, timeout, connectTimeout } = platformaticClientOptions(this.options);
      this.admin = new Admin({
        clientId,
        bootstrapBrokers,
        // UNSTABLE_OFFSET_COMMIT lasts as long as the coordinator takes to apply a commit's markers.
        retries: Math.max(retries as number, 10),
        retryDelay,
        timeout,
        connectTimeout,
        ...(tls ? { tls, tlsServerName } : {}),
        ...(sasl ? { sasl } : {}),
      } as ConstructorParameters<typeof Admin>[0]);
    }
    return this.admin;
  }
}
