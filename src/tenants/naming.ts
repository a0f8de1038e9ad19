import { topicNameProblem } from '../shared/kafkaNames.js';
import type { MessageProducer, SendResult } from '../relay/messageProducer.js';
import type { RelayMessage } from '../relay/message.js';

/**
 * How a tenant's messages are named in Kafka. The user picks: a topic per tenant
 * (`{tenant}.{topic}`, the default) or shared topics (`{topic}`) with the tenant in a
 * header and in the key's prefix (`{tenant}:{key}`), so that two tenants' entities of one
 * id stay two keys.
 */
export interface TenantNaming {
  /** The topic of a row of tenant `{tenant}` whose topic column is `{topic}` (default `{tenant}.{topic}`). */
  topicTemplate: string;
  /** The Kafka key of a row whose key column is `{key}` (default `{key}`); it decides the partition. */
  keyTemplate: string;
  /** A header carrying the tenant's name on every message (default `outbox-tenant`; empty: none). */
  tenantHeader: string;
}

const PLACEHOLDER = /\{([a-z]*)\}/g;

function fill(template: string, values: Record<string, string>): string {
  return template.replace(PLACEHOLDER, (_, name: string) => values[name]!);
}

/** What is wrong with a naming, with the setting to blame, or undefined. */
export function tenantNamingProblem(naming: TenantNaming): { setting: string; problem: string } | undefined {
  const placeholders = (t: string): string[] => [...t.matchAll(PLACEHOLDER)].map((m) => m[1]!);
  const topicNames = placeholders(naming.topicTemplate);
  const strayTopic = topicNames.find((p) => p !== 'tenant' && p !== 'topic');
  if (strayTopic !== undefined) return { setting: 'topicTemplate', problem: `{${strayTopic}} is not a placeholder: use {tenant} and {topic}` };
  const sample = topicNameProblem(fill(naming.topicTemplate, { tenant: 't', topic: 'x' }));
  if (sample) return { setting: 'topicTemplate', problem: `${JSON.stringify(naming.topicTemplate)} does not make a topic name: ${sample}` };
  const keyNames = placeholders(naming.keyTemplate);
  if (keyNames.filter((p) => p === 'key').length !== 1 || keyNames.some((p) => p !== 'key' && p !== 'tenant')) {
    return { setting: 'keyTemplate', problem: `${JSON.stringify(naming.keyTemplate)} must hold {key} once, and no placeholder but {key} and {tenant}` };
  }
  if (!topicNames.includes('tenant') && !keyNames.includes('tenant')) {
    return {
      setting: 'keyTemplate',
      problem: 'with a topic shared by every tenant, the key must carry the tenant (e.g. "{tenant}:{key}"): otherwise two tenants\' entities of one id would be one key, and a consumer could not tell them apart by key',
    };
  }
  if (naming.tenantHeader !== '' && !/^[A-Za-z0-9._-]{1,100}$/.test(naming.tenantHeader)) {
    return { setting: 'tenantHeader', problem: `${JSON.stringify(naming.tenantHeader)} is not a header name (1-100 of A-Z a-z 0-9 . _ -), nor empty for none` };
  }
  return undefined;
}

/** What is wrong with a tenant's name under this naming (it must make legal topic names), or undefined. */
export function tenantNameProblem(naming: TenantNaming, tenant: string): string | undefined {
  if (!/^[A-Za-z0-9._-]{1,100}$/.test(tenant)) return `tenant ${JSON.stringify(tenant.slice(0, 120))} is not 1-100 of A-Z a-z 0-9 . _ -`;
  const problem = topicNameProblem(fill(naming.topicTemplate, { tenant, topic: 'x' }));
  return problem ? `tenant ${JSON.stringify(tenant)} makes no topic name: ${problem}` : undefined;
}

/** The topic of `tenant`'s row whose topic column is `topic`. */
export function tenantTopic(naming: TenantNaming, tenant: string, topic: string): string {
  return fill(naming.topicTemplate, { tenant, topic });
}

/** A message of `tenant`, named as `naming` says: a copy, the row's own message untouched (a re-send names it again). */
export function tenantMessage(naming: TenantNaming, tenant: string, m: RelayMessage): RelayMessage {
  const headers = naming.tenantHeader === '' ? m.headers : { ...m.headers, [naming.tenantHeader]: tenant };
  return { ...m, topic: tenantTopic(naming, tenant, m.topic), key: fill(naming.keyTemplate, { tenant, key: m.key }), headers };
}

/**
 * The producer a tenant's relay sends through: the tenant relay's one shared producer,
 * each message named for the tenant. `beforeSend` may hold a send back (the tenant relay
 * paces a tenant draining a backlog while others have fresh rows). Disconnecting it does
 * nothing (the owner does).
 */
export function tenantProducer(shared: MessageProducer, naming: TenantNaming, tenant: string, beforeSend?: () => Promise<void>): MessageProducer {
  return {
    adapter: shared.adapter,
    send: async (messages: readonly RelayMessage[]): Promise<SendResult[]> => {
      await beforeSend?.();
      return shared.send(messages.map((m) => tenantMessage(naming, tenant, m)));
    },
    disconnect: () => Promise.resolve(),
  };
}
