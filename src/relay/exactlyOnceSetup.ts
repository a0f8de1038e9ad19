import kafkajs, { Partitioners, type Admin, type Kafka } from 'kafkajs';
import { OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { KafkajsTopicMetadata } from './producer.js';
import { TransactionalUnit } from './transactionalUnit.js';
import { PlatformaticUnit } from './platformaticUnit.js';
import { ProgressCommitter } from './progressCommit.js';
import type { ExactlyOnceUnit } from './exactlyOnceUnit.js';
import { guardLibraryCall } from '../shared/libraryGuard.js';
import { ProgressReader } from './progressReader.js';
import { innermost, kafkaErrorType } from './publishErrors.js';
import type { ResolvedRelayOptions } from './options.js';

// What exactly-once mode sets up at start (docs/exactly-once.md): the names it works
// under, the broker settings it depends on, the progress topic, and the permissions on
// transactional ids and on the progress group, each checked with one clear line when it
// fails, before the relay claims anything.

// Not a named export Node's ESM loader finds in kafkajs' CommonJS.
const { ConfigResourceTypes } = kafkajs;

/** Kafka's default offset.metadata.max.bytes: what a progress record may hold when the broker's settings cannot be read. */
const DEFAULT_METADATA_MAX_BYTES = 4_096;
/** Below this a 500-row batch would go out in several transactions, most of the time. */
const MIN_METADATA_MAX_BYTES = 1_024;
/** How long the transactional-id check waits for Kafka's transaction coordinator. */
const INIT_CHECK_TIMEOUT_MS = 30_000;

/** The Kafka names of one outbox in exactly-once mode. */
export interface ExactlyOnceNames {
  transactionalId(unit: number): string;
  /** The consumer group whose offsets hold each unit's progress (it never has members). */
  progressGroup: string;
  /** The topic those offsets are on, one partition per unit; no record is ever written to it. */
  progressTopic: string;
}

export function exactlyOnceNames(prefix: string, schema: string): ExactlyOnceNames {
  return {
    transactionalId: (unit) => `${prefix}.${schema}.unit-${unit}`,
    progressGroup: `${prefix}.${schema}.progress`,
    progressTopic: `${prefix}.progress`,
  };
}

/** A running relay's exactly-once side: its units and what they share. */
export interface ExactlyOnce {
  names: ExactlyOnceNames;
  units: ExactlyOnceUnit[];
  close(): Promise<void>;
}

/** Every call into kafkajs: nothing it throws from its callbacks escapes (../shared/libraryGuard.ts). */
const guarded = <T>(call: string, fn: () => Promise<T>): Promise<T> => guardLibraryCall('kafkajs', call, fn);

/** Refused at start: Kafka lacks something exactly-once mode needs. Not retriable: a setting or a permission. */
export class ExactlyOnceRefused extends OutboxError {
  constructor(message: string, cause?: unknown) {
    super(`exactly-once delivery cannot start: ${message}`, { retriable: false, cause });
  }
}

/**
 * Check what exactly-once mode needs of Kafka and build the relay's units.
 * @throws ExactlyOnceRefused naming what is missing
 */
export async function setUpExactlyOnce(kafka: Kafka, o: ResolvedRelayOptions, instanceId: string, logger: Logger): Promise<ExactlyOnce> {
  const names = exactlyOnceNames(o.transactionalIdPrefix, o.schema);
  const admin = kafka.admin();
  const metadata = new KafkajsTopicMetadata(kafka);
  const progress = new ProgressReader(o, names.progressGroup, names.progressTopic);
  // One per unit, each with its own connection: a broker answers a connection's requests
  // one at a time, and the units' progress commits queued behind each other on a shared one.
  const committers =
    o.producer === 'platformatic' ? Array.from({ length: o.exactlyOnceUnits }, () => new ProgressCommitter(o, progress, names.progressGroup, names.progressTopic)) : undefined;
  const close = async (): Promise<void> => {
    await metadata.close();
    await Promise.all((committers ?? []).map((c) => c.close()));
    await progress.close();
    await admin.disconnect().catch(() => undefined);
  };
  try {
    await guarded('admin.connect', () => admin.connect());
    const maxProgressChars = await checkBrokerSettings(admin, o, logger);
    await ensureProgressTopic(admin, names.progressTopic, o.exactlyOnceUnits);
    await checkTransactionalIds(kafka, progress, `${o.transactionalIdPrefix}.${o.schema}.start-check.${instanceId}`, o.transactionTimeoutMs);
    await checkProgressGroup(progress, names);
    let announced = false;
    const onCommitted = (): void => {
      if (announced) return;
      announced = true;
      logger.info({ producer: o.producer, delivery: 'exactly-once' }, 'producer adapter publishing');
    };
    logger.info({ progressTopic: names.progressTopic, progressGroup: names.progressGroup, transactionalIds: names.transactionalId(0).replace(/0$/, '*'), units: o.exactlyOnceUnits }, 'exactly-once delivery: Kafka checks passed');
    const units = Array.from({ length: o.exactlyOnceUnits }, (_, unit): ExactlyOnceUnit =>
      committers
        ? new PlatformaticUnit({
            client: o,
            progress,
            committer: committers[unit]!,
            unit,
            transactionalId: names.transactionalId(unit),
            progressGroup: names.progressGroup,
            transactionTimeoutMs: o.transactionTimeoutMs,
            maxProgressChars,
            logger,
            onCommitted,
          })
        : new TransactionalUnit({
          kafka,
          progress,
          metadata: metadata.metadata,
          unit,
          transactionalId: names.transactionalId(unit),
          progressGroup: names.progressGroup,
          progressTopic: names.progressTopic,
          transactionTimeoutMs: o.transactionTimeoutMs,
          compression: o.compression,
          maxProgressChars,
          logger,
          onCommitted,
        }),
    );
    return {
      names,
      units,
      close: async () => {
        await Promise.all(units.map((u) => u.close()));
        await close();
      },
    };
  } catch (error) {
    await close();
    if (error instanceof ExactlyOnceRefused) throw error;
    // Not a setting or a permission: Kafka did not answer (a broker down, a coordinator
    // not elected yet). The relay tries again (relay.ts).
    throw new OutboxError(`exactly-once delivery: Kafka did not answer the start-up checks: ${describeError(error)}`, { retriable: true, cause: error });
  }
}

/** Kafka's refusals that a retry does not change: a permission or a setting, found inside either client's wrappers. */
function refusedForGood(error: unknown): boolean {
  return [error, ...innermost(error)].some((e) => /AUTHORIZATION_FAILED|POLICY_VIOLATION|INVALID_/.test(kafkaErrorType(e) ?? '') || /authorization failed/i.test((e as Error)?.message ?? ''));
}

/** The broker settings transactions depend on; returns the longest progress record. */
async function checkBrokerSettings(admin: Admin, o: ResolvedRelayOptions, logger: Logger): Promise<number> {
  const { brokers } = await guarded('admin.describeCluster', () => admin.describeCluster());
  let settings: Map<string, string>;
  try {
    const described = await guarded('admin.describeConfigs', () =>
      admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.BROKER, name: String(brokers[0]!.nodeId) }], includeSynonyms: false }),
    );
    settings = new Map(described.resources[0]!.configEntries.map((e) => [e.configName, e.configValue]));
  } catch (error) {
    logger.warn(
      { err: describeError(error) },
      'exactly-once delivery: cannot read the broker settings (DescribeConfigs on the cluster refused?); transaction.state.log.*, transaction.max.timeout.ms and offset.metadata.max.bytes are not checked',
    );
    return DEFAULT_METADATA_MAX_BYTES;
  }
  const number = (name: string): number | undefined => (settings.has(name) ? Number(settings.get(name)) : undefined);
  const replication = number('transaction.state.log.replication.factor');
  const minIsr = number('transaction.state.log.min.isr');
  const topics = await guarded('admin.listTopics', () => admin.listTopics());
  if (replication !== undefined && replication > brokers.length && !topics.includes('__transaction_state')) {
    // Brokers down at this moment look the same as brokers that are not there: a warning,
    // and the transactional-id check below waits for the transaction log.
    logger.warn(
      { replicationFactor: replication, brokers: brokers.length },
      "exactly-once delivery: the brokers' transaction.state.log.replication.factor is above the brokers that answer: Kafka cannot create its transaction log (__transaction_state) until enough of them do; lower it if the cluster is that small",
    );
  }
  if (replication !== undefined && minIsr !== undefined && minIsr > replication) {
    throw new ExactlyOnceRefused(`the brokers' transaction.state.log.min.isr (${minIsr}) is above transaction.state.log.replication.factor (${replication}): no transaction could commit`);
  }
  const maxTimeout = number('transaction.max.timeout.ms');
  if (maxTimeout !== undefined && o.transactionTimeoutMs > maxTimeout) {
    throw new ExactlyOnceRefused(
      `--transaction-timeout-ms ${o.transactionTimeoutMs} is above the brokers' transaction.max.timeout.ms (${maxTimeout}): lower it or raise the broker's`,
    );
  }
  const metadataMax = number('offset.metadata.max.bytes') ?? DEFAULT_METADATA_MAX_BYTES;
  if (metadataMax < MIN_METADATA_MAX_BYTES) {
    throw new ExactlyOnceRefused(`the brokers' offset.metadata.max.bytes is ${metadataMax}: a batch's progress needs at least ${MIN_METADATA_MAX_BYTES} (Kafka's default is 4096)`);
  }
  return metadataMax;
}

/** The progress topic, one partition per unit: created when missing, refused when of another size. */
async function ensureProgressTopic(admin: Admin, topic: string, units: number): Promise<void> {
  const partitions = async (): Promise<number | undefined> => {
    try {
      const { topics } = await guarded('admin.fetchTopicMetadata', () => admin.fetchTopicMetadata({ topics: [topic] }));
      return topics[0]?.partitions.length;
    } catch (error) {
      if ((error as { type?: string }).type === 'UNKNOWN_TOPIC_OR_PARTITION') return undefined;
      throw error;
    }
  };
  let count = await partitions();
  if (count === undefined) {
    try {
      await guarded('admin.createTopics', () => admin.createTopics({ topics: [{ topic, numPartitions: units }], waitForLeaders: true }));
    } catch (error) {
      const type = (error as { type?: string }).type;
      // Another relay created it meanwhile: fine. Refused: the operator creates it. Else
      // (a broker down) the start is tried again.
      if (type !== 'TOPIC_ALREADY_EXISTS' && !/already exists/i.test(describeError(error))) {
        if (!refusedForGood(error)) throw error;
        throw new ExactlyOnceRefused(
          `the progress topic ${JSON.stringify(topic)} does not exist and could not be created (${describeError(error)}): create it with ${units} partitions (--exactly-once-units), or allow CREATE on it`,
          error,
        );
      }
    }
    count = await partitions();
  }
  // Just created (here or by another relay): the brokers' metadata may not show its
  // partitions yet. A moment, not a refusal.
  for (let i = 0; i < 50 && !count; i++) {
    await new Promise((r) => setTimeout(r, 100));
    count = await partitions();
  }
  if (!count) throw new OutboxError(`the progress topic ${JSON.stringify(topic)} shows no partitions yet`, { retriable: true });
  if (count !== units) {
    throw new ExactlyOnceRefused(
      `the progress topic ${JSON.stringify(topic)} has ${count} partitions, one per unit of shards of the relays that created it, and --exactly-once-units is ${units}: ` +
        `every relay of a prefix must cut the shards into the same units. Set --exactly-once-units ${count}; or, to change the count, stop every relay of the prefix (a soft stop, which finishes its transactions) and start them all under a new --transactional-id-prefix (docs/exactly-once.md#units)`,
    );
  }
}

/** InitProducerId under a transactional id of the prefix: the WRITE permission on them, and a transaction coordinator that answers. */
async function checkTransactionalIds(kafka: Kafka, progress: ProgressReader, transactionalId: string, transactionTimeoutMs: number): Promise<void> {
  // kafkajs turns a refusal of the transactional id into "Failed to find group coordinator":
  // ask once through the client that reports it.
  try {
    await progress.findTransactionCoordinator(transactionalId);
  } catch (error) {
    if (refusedForGood(error)) throw new ExactlyOnceRefused(`Kafka refused the transactional id ${JSON.stringify(transactionalId)}: allow WRITE and DESCRIBE on TransactionalId with this prefix`, error);
    throw error;
  }
  const producer = kafka.producer({ transactionalId, transactionTimeout: transactionTimeoutMs, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner, retry: { retries: 5 } });
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      (async () => {
        await guarded('producer.connect', () => producer.connect());
        const t = await guarded('producer.transaction', () => producer.transaction());
        await guarded('transaction.abort', () => t.abort());
      })(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer from Kafka's transaction coordinator in ${INIT_CHECK_TIMEOUT_MS} ms`)), INIT_CHECK_TIMEOUT_MS);
      }),
    ]);
  } catch (error) {
    const why = describeError(error);
    if (/TRANSACTIONAL_ID_AUTHORIZATION_FAILED|Transactional Id authorization failed/i.test(why) || (error as { type?: string }).type === 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED') {
      throw new ExactlyOnceRefused(`Kafka refused the transactional id ${JSON.stringify(transactionalId)}: allow WRITE and DESCRIBE on TransactionalId with this prefix`, error);
    }
    if (refusedForGood(error)) throw new ExactlyOnceRefused(`Kafka refused a transactional producer (${why})`, error);
    throw new OutboxError(`could not start a transactional producer (${why}): is the transaction log (__transaction_state) available (enough brokers up for its replication factor)?`, { retriable: true, cause: error });
  } finally {
    clearTimeout(timer);
    await producer.disconnect().catch(() => undefined);
  }
}

/** OffsetFetch on the progress group: the READ and DESCRIBE permissions a unit's start needs. */
async function checkProgressGroup(progress: ProgressReader, names: ExactlyOnceNames): Promise<void> {
  try {
    // Not require_stable: a relay killed inside a transaction of unit 0 left its progress
    // commit pending, and the coordinator answers UNSTABLE_OFFSET_COMMIT until that
    // transaction ends, at its timeout (30 s by default) when no relay fences it first.
    // Restarted relays waited that long in this check (the fault suite's eos-cluster-ci,
    // two relays on two units, both killed). The unit's own start fences, then reads stable.
    await progress.read(0, { stable: false });
  } catch (error) {
    if (!refusedForGood(error)) throw error;
    throw new ExactlyOnceRefused(
      `cannot read the progress group ${JSON.stringify(names.progressGroup)} (${describeError(error)}): allow READ and DESCRIBE on the group and DESCRIBE on topic ${JSON.stringify(names.progressTopic)}`,
      error,
    );
  }
}
