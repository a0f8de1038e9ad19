/**
 * The checker of the tenant profiles: every tenant's topic judged against that tenant's
 * committed rows as checker.ts judges one outbox (lost, reordered per key, rolled back
 * delivered...), and on top, the one thing a tenant relay must never do: put a tenant's
 * row where another tenant reads it. Each message is held against the tenant whose topic
 * it is on, by the tenant that wrote its row (the writers made the message ids), by its
 * `outbox-tenant` header, and by its key (every tenant's keys carry its own prefix).
 *
 * `checkTenants()` is pure (test/unit/faultsChecker.test.ts); `readTenantTopics()` feeds it.
 */
import '../../src/shared/kafkajsIdleFix.js';
import { Kafka, logLevel } from 'kafkajs';
import { check, readWholeTopic, violations, type CheckResult, type Delivered, type Example, type OutboxRow, type WriterLog } from './checker.js';

/** One tenant as the harness made it: where its rows must go, and what it committed. */
export interface TenantOrigin {
  tenant: string;
  /** The only topic its rows may be on ({tenant}.{topic}, the relay's default naming). */
  topic: string;
  /** Every key its writers used starts with this; no other tenant's does. */
  keyPrefix: string;
  /** Its outbox table after the run (a dropped tenant's, as read just before its drop). */
  outbox: readonly OutboxRow[];
  writers: WriterLog;
}

/** A message read from one of the run's topics. */
export interface TenantMessage extends Delivered {
  topic: string;
}

export interface TenantCheckResult {
  /** Every tenant's result added up (the counts; a few examples of each kind). */
  merged: CheckResult;
  perTenant: Record<string, CheckResult>;
  /** Messages on a tenant's topic that are not that tenant's: another tenant's row, another
   *  tenant's name in the header or another tenant's key; or on a topic of no tenant. */
  wrongTenant: number;
  wrongTenantExamples: Example[];
}

const EXAMPLES = 5;

export function checkTenants(tenants: readonly TenantOrigin[], messages: readonly TenantMessage[]): TenantCheckResult {
  const byTopic = new Map(tenants.map((t) => [t.topic, t]));
  // Whose row each message id is: committed, rolled back or of unknown outcome alike.
  const origin = new Map<string, string>();
  for (const t of tenants) {
    for (const r of t.outbox) origin.set(r.messageId, t.tenant);
    for (const id of [...t.writers.committed, ...t.writers.rolledBack, ...t.writers.unknown]) origin.set(id, t.tenant);
  }
  let wrongTenant = 0;
  const wrongTenantExamples: Example[] = [];
  const onTopic = new Map<string, TenantMessage[]>(tenants.map((t) => [t.tenant, []]));
  for (const m of messages) {
    const owner = byTopic.get(m.topic);
    const from = m.messageId === undefined ? undefined : origin.get(m.messageId);
    const problem = !owner
      ? `on topic ${m.topic}, which is no tenant's`
      : from !== undefined && from !== owner.tenant
        ? `a row of tenant ${from} on tenant ${owner.tenant}'s topic`
        : m.tenant !== owner.tenant
          ? `header outbox-tenant ${JSON.stringify(m.tenant ?? null)} on tenant ${owner.tenant}'s topic`
          : m.key !== null && !m.key.startsWith(owner.keyPrefix)
            ? `key ${m.key} is not one of tenant ${owner.tenant}'s (${owner.keyPrefix}…)`
            : undefined;
    if (problem) {
      wrongTenant++;
      if (wrongTenantExamples.length < EXAMPLES) wrongTenantExamples.push({ messageId: m.messageId ?? '(none)', ...(m.key === null ? {} : { key: m.key }), ...(m.outboxId === undefined ? {} : { outboxId: m.outboxId }), detail: `${problem} (partition ${m.partition} offset ${m.offset})` });
    }
    // Judged with the tenant whose topic it is on: another tenant's row is then also
    // "not a row of the outbox nor of any writer" there (malformed), and lost in its own.
    if (owner) onTopic.get(owner.tenant)!.push(m);
  }
  const perTenant: Record<string, CheckResult> = {};
  for (const t of tenants) perTenant[t.tenant] = check({ delivered: onTopic.get(t.tenant)!, outbox: t.outbox, effects: [], noConsumers: true, writers: t.writers });
  return { merged: mergeResults(Object.values(perTenant)), perTenant, wrongTenant, wrongTenantExamples };
}

/** The violations that fail a tenant run: the checker's, and any message on a wrong tenant's topic. */
export function tenantViolations(r: TenantCheckResult): string[] {
  return [...violations(r.merged), ...(r.wrongTenant > 0 ? [`wrongTenant=${r.wrongTenant}`] : [])];
}

/** Several outboxes' results as one: the counts added up, the examples pooled (a few of each kind). */
export function mergeResults(results: readonly CheckResult[]): CheckResult {
  const merged = check({ delivered: [], outbox: [], effects: [], noConsumers: true, writers: { committed: [], rolledBack: [], unknown: [] } });
  const counts = merged as unknown as Record<string, number>;
  for (const r of results) {
    for (const [k, v] of Object.entries(r)) if (typeof v === 'number') counts[k] = (counts[k] ?? 0) + v;
    for (const [kind, list] of Object.entries(r.examples)) merged.examples[kind] = [...(merged.examples[kind] ?? []), ...list].slice(0, EXAMPLES);
  }
  return merged;
}

/**
 * Every message of every topic whose name starts with `prefix` (every tenant's, and any
 * other the relays might have written to), from the beginning to the high watermarks.
 */
export async function readTenantTopics(brokers: string[], prefix: string, timeoutMs: number): Promise<TenantMessage[]> {
  const admin = new Kafka({ clientId: 'faults-checker', brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  let topics: string[];
  try {
    topics = (await admin.listTopics()).filter((t) => t.startsWith(prefix)).sort();
  } finally {
    await admin.disconnect();
  }
  // At once: each reader waits for its own group to form, a few seconds each.
  const read = await Promise.all(topics.map(async (topic) => (await readWholeTopic(brokers, topic, timeoutMs)).map((m) => ({ ...m, topic }))));
  return read.flat();
}
