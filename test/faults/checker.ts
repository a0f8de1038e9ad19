/**
 * The independent checker of the fault-injection suite. It trusts neither the relay nor
 * the consumers: it reads the topic from the beginning with a plain kafkajs consumer of
 * its own group, the consumers' effects table and the outbox table, and compares them
 * with what the writers know they did.
 *
 * `check()` is the pure part (unit-tested in test/unit/faultsChecker.test.ts); the readers
 * below it feed it.
 */
import '../../src/shared/kafkajsIdleFix.js';
import { Kafka, logLevel } from 'kafkajs';
import type pg from 'pg';

/** One message read from the topic. */
export interface Delivered {
  partition: number;
  offset: number;
  key: string | null;
  /** `message-id` header. */
  messageId: string | undefined;
  /** `outbox-id` header. */
  outboxId: number | undefined;
  /** `outbox-tenant` header, where the message has one (the tenant relay sets it). */
  tenant?: string;
}

/** One row of the outbox table after the run: the rows that committed. */
export interface OutboxRow {
  messageId: string;
  outboxId: number;
  key: string;
  sent: boolean;
}

/** One row of the consumers' effects table. */
export interface EffectRow {
  /** Insertion order (a bigserial). */
  seq: number;
  messageId: string;
  key: string;
  outboxId: number;
  consumer: string;
}

/** What the writers know about the rows they tried to insert. */
export interface WriterLog {
  /** Rows of transactions whose COMMIT succeeded. */
  committed: string[];
  /** Rows of transactions rolled back on purpose or after an error before COMMIT. */
  rolledBack: string[];
  /** Rows of transactions whose COMMIT failed with a connection error: outcome unknown
   *  until the outbox table is read. */
  unknown: string[];
}

export interface CheckInput {
  delivered: readonly Delivered[];
  outbox: readonly OutboxRow[];
  effects: readonly EffectRow[];
  /** A run without consumers (the tenant profiles): no effects, and none missing. */
  noConsumers?: boolean;
  writers: WriterLog;
}

export interface Example {
  messageId: string;
  key?: string;
  outboxId?: number;
  detail?: string;
}

export interface CheckResult {
  /** Rows in the outbox table: the committed ones. */
  committedRows: number;
  /** Messages read from the topic, duplicates included. */
  wireMessages: number;
  /** Distinct message ids read from the topic. */
  deliveredDistinct: number;
  /** Committed rows never delivered on the wire. */
  lost: number;
  /** Committed rows still unsent in the outbox table. */
  unsent: number;
  /** Rows of rolled-back transactions (known, or unknown outcome and absent) delivered on the wire. */
  rolledBackDelivered: number;
  /** Messages read beyond the first of their message id. */
  wireDuplicates: number;
  /** Message ids with more than one effect row (counted once per extra row). */
  duplicateEffects: number;
  /** Committed rows without any effect row. */
  missingEffects: number;
  /** Effect rows of messages that are not committed rows. */
  foreignEffects: number;
  /** Messages first delivered after the first delivery of a higher outbox id of the same key. */
  reorderings: number;
  /** Same, in the order effects were applied (informational: a replay without dedup applies old events again). */
  effectReorderings: number;
  /** Rows a writer saw commit that are not in the outbox table. */
  committedMissingInDb: number;
  /** Unknown-outcome transactions' rows found committed / found absent. */
  unknownCommitted: number;
  unknownAbsent: number;
  /** Rolled-back rows the writers know of (for scale). */
  rolledBackRows: number;
  /** Messages on the wire without a message-id or outbox-id header, or whose headers disagree with the outbox. */
  malformed: number;
  /** Keys whose messages were found in more than one partition. */
  keysSplit: number;
  /** A few of each, for the report. */
  examples: Record<string, Example[]>;
}

const EXAMPLES = 5;

/** Compare what was delivered and applied with what committed. */
export function check(input: CheckInput): CheckResult {
  const examples: Record<string, Example[]> = {};
  const note = (kind: string, example: Example): void => {
    const list = (examples[kind] ??= []);
    if (list.length < EXAMPLES) list.push(example);
  };

  const outboxById = new Map<string, OutboxRow>();
  for (const row of input.outbox) outboxById.set(row.messageId, row);

  const rolledBack = new Set(input.writers.rolledBack);
  let unknownCommitted = 0;
  let unknownAbsent = 0;
  for (const id of input.writers.unknown) {
    if (outboxById.has(id)) unknownCommitted++;
    else {
      unknownAbsent++;
      rolledBack.add(id);
    }
  }
  let committedMissingInDb = 0;
  for (const id of input.writers.committed) {
    if (!outboxById.has(id)) {
      committedMissingInDb++;
      note('committedMissingInDb', { messageId: id });
    }
  }

  // The wire: per partition in offset order, which is each key's order.
  const wire = [...input.delivered].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
  const seen = new Set<string>();
  const partitionOfKey = new Map<string, number>();
  const splitKeys = new Set<string>();
  const highestOfKey = new Map<string, number>();
  let wireDuplicates = 0;
  let rolledBackDelivered = 0;
  let reorderings = 0;
  let malformed = 0;
  for (const m of wire) {
    if (m.messageId === undefined || m.outboxId === undefined || m.key === null) {
      malformed++;
      note('malformed', { messageId: m.messageId ?? '(none)', detail: `partition ${m.partition} offset ${m.offset}` });
      continue;
    }
    const known = partitionOfKey.get(m.key);
    if (known === undefined) partitionOfKey.set(m.key, m.partition);
    else if (known !== m.partition && !splitKeys.has(m.key)) {
      splitKeys.add(m.key);
      note('keysSplit', { messageId: m.messageId, key: m.key, detail: `partitions ${known} and ${m.partition}` });
    }
    if (seen.has(m.messageId)) {
      wireDuplicates++;
      note('wireDuplicates', { messageId: m.messageId, key: m.key, outboxId: m.outboxId, detail: `again in partition ${m.partition} at offset ${m.offset}` });
      continue;
    }
    seen.add(m.messageId);
    const row = outboxById.get(m.messageId);
    if (!row) {
      if (rolledBack.has(m.messageId)) {
        rolledBackDelivered++;
        note('rolledBackDelivered', { messageId: m.messageId, key: m.key, outboxId: m.outboxId });
      } else {
        malformed++;
        note('malformed', { messageId: m.messageId, key: m.key, outboxId: m.outboxId, detail: 'not a row of the outbox nor of any writer' });
      }
    } else if (row.outboxId !== m.outboxId || row.key !== m.key) {
      malformed++;
      note('malformed', { messageId: m.messageId, key: m.key, outboxId: m.outboxId, detail: `outbox has id ${row.outboxId} key ${row.key}` });
    }
    const highest = highestOfKey.get(m.key) ?? 0;
    if (m.outboxId < highest) {
      reorderings++;
      note('reorderings', { messageId: m.messageId, key: m.key, outboxId: m.outboxId, detail: `first delivered after outbox id ${highest} of the same key (partition ${m.partition} offset ${m.offset})` });
    } else {
      highestOfKey.set(m.key, m.outboxId);
    }
  }

  let lost = 0;
  let unsent = 0;
  for (const row of input.outbox) {
    if (!row.sent) unsent++;
    if (!seen.has(row.messageId)) {
      lost++;
      note('lost', { messageId: row.messageId, key: row.key, outboxId: row.outboxId, detail: row.sent ? 'marked sent' : 'unsent' });
    }
  }

  // Effects, in the order they were applied.
  const effects = [...input.effects].sort((a, b) => a.seq - b.seq);
  const effectCount = new Map<string, number>();
  const highestEffectOfKey = new Map<string, number>();
  let duplicateEffects = 0;
  let foreignEffects = 0;
  let effectReorderings = 0;
  for (const e of effects) {
    const n = (effectCount.get(e.messageId) ?? 0) + 1;
    effectCount.set(e.messageId, n);
    if (n > 1) {
      duplicateEffects++;
      note('duplicateEffects', { messageId: e.messageId, key: e.key, outboxId: e.outboxId, detail: `effect #${n}, by ${e.consumer}` });
      continue;
    }
    if (!outboxById.has(e.messageId)) {
      foreignEffects++;
      note('foreignEffects', { messageId: e.messageId, key: e.key, outboxId: e.outboxId });
    }
    const highest = highestEffectOfKey.get(e.key) ?? 0;
    if (e.outboxId < highest) {
      effectReorderings++;
      note('effectReorderings', { messageId: e.messageId, key: e.key, outboxId: e.outboxId, detail: `applied after outbox id ${highest}` });
    } else {
      highestEffectOfKey.set(e.key, e.outboxId);
    }
  }
  let missingEffects = 0;
  for (const row of input.noConsumers ? [] : input.outbox) {
    if (!effectCount.has(row.messageId)) {
      missingEffects++;
      note('missingEffects', { messageId: row.messageId, key: row.key, outboxId: row.outboxId });
    }
  }

  return {
    committedRows: input.outbox.length,
    wireMessages: input.delivered.length,
    deliveredDistinct: seen.size,
    lost,
    unsent,
    rolledBackDelivered,
    wireDuplicates,
    duplicateEffects,
    missingEffects,
    foreignEffects,
    reorderings,
    effectReorderings,
    committedMissingInDb,
    unknownCommitted,
    unknownAbsent,
    rolledBackRows: input.writers.rolledBack.length,
    malformed,
    keysSplit: splitKeys.size,
    examples,
  };
}

/** The violations that fail a run (each must be 0). */
export function violations(r: CheckResult): string[] {
  const out: string[] = [];
  if (r.lost > 0) out.push(`lost=${r.lost}`);
  if (r.rolledBackDelivered > 0) out.push(`rolledBackDelivered=${r.rolledBackDelivered}`);
  if (r.duplicateEffects > 0) out.push(`duplicateEffects=${r.duplicateEffects}`);
  if (r.reorderings > 0) out.push(`reorderings=${r.reorderings}`);
  if (r.missingEffects > 0) out.push(`missingEffects=${r.missingEffects}`);
  if (r.foreignEffects > 0) out.push(`foreignEffects=${r.foreignEffects}`);
  if (r.committedMissingInDb > 0) out.push(`committedMissingInDb=${r.committedMissingInDb}`);
  if (r.malformed > 0) out.push(`malformed=${r.malformed}`);
  if (r.keysSplit > 0) out.push(`keysSplit=${r.keysSplit}`);
  return out;
}

// ---------------------------------------------------------------------------------------
// Readers

/**
 * Read every message of `topic` from the beginning with a consumer group of its own, up
 * to the high watermarks taken at the start (the caller waits until the relays are
 * drained, so nothing more is coming).
 */
export async function readWholeTopic(brokers: string[], topic: string, timeoutMs: number): Promise<Delivered[]> {
  const kafka = new Kafka({ clientId: 'faults-checker', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  let ends: Map<number, number>;
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    ends = new Map(offsets.map((o) => [o.partition, Number(o.high)]));
  } finally {
    await admin.disconnect();
  }
  const remaining = new Set([...ends].filter(([, high]) => high > 0).map(([p]) => p));
  const out: Delivered[] = [];
  if (remaining.size === 0) return out;
  const consumer = kafka.consumer({ groupId: `faults-checker-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, maxWaitTimeInMs: 200, maxBytes: 50 * 1024 * 1024 });
  await consumer.connect();
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        const high = ends.get(batch.partition) ?? 0;
        for (const m of batch.messages) {
          const offset = Number(m.offset);
          if (offset >= high) break;
          const header = (name: string): string | undefined => {
            const v = m.headers?.[name];
            if (v === undefined) return undefined;
            return (Array.isArray(v) ? v[0] : v)?.toString();
          };
          const outboxId = header('outbox-id');
          const tenant = header('outbox-tenant');
          out.push({
            partition: batch.partition,
            offset,
            key: m.key?.toString() ?? null,
            messageId: header('message-id'),
            outboxId: outboxId === undefined ? undefined : Number(outboxId),
            ...(tenant === undefined ? {} : { tenant }),
          });
          if (offset >= high - 1) {
            remaining.delete(batch.partition);
            if (remaining.size === 0) done();
          }
        }
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs)));
    const outcome = await Promise.race([finished.then(() => 'done' as const), timeout]);
    clearTimeout(timer);
    if (outcome === 'timeout') throw new Error(`checker: topic ${topic} not read to its end within ${timeoutMs} ms (partitions left: ${[...remaining].join(',')})`);
  } finally {
    await consumer.disconnect().catch(() => undefined);
  }
  return out;
}

export async function readOutbox(pool: pg.Pool, schema: string): Promise<OutboxRow[]> {
  const { rows } = await pool.query<{ message_id: string; id: number; key: string; sent: boolean }>(
    `SELECT message_id::text, id, key, sent_at IS NOT NULL AS sent FROM "${schema}".outbox`,
  );
  return rows.map((r) => ({ messageId: r.message_id, outboxId: Number(r.id), key: r.key, sent: r.sent }));
}

export async function readEffects(pool: pg.Pool, schema: string): Promise<EffectRow[]> {
  const { rows } = await pool.query<{ seq: number; message_id: string; key: string; outbox_id: number; consumer: string }>(
    `SELECT seq, message_id::text, key, outbox_id, consumer FROM "${schema}".effects`,
  );
  return rows.map((r) => ({ seq: Number(r.seq), messageId: r.message_id, key: r.key, outboxId: Number(r.outbox_id), consumer: r.consumer }));
}
