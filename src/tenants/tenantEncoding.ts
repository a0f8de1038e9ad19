import { createRowEncoder, type ResolvedEncodingOptions } from '../encodings/index.js';
import { ConfigError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { encoderStep, type EncodingStep } from '../relay/encodingStep.js';
import { tenantTopic, type TenantNaming } from './naming.js';

/**
 * Schema-registry encodings under a tenant rule (docs/encodings.md): one encoder for every
 * tenant, so a schema is registered or looked up once per subject, not again at each
 * tenant's turn (a tenant's relay is made anew at every turn). Rules match, and subjects
 * name, the topic the message goes to: the tenant's, made by the topic template.
 */
export interface TenantEncoding {
  /** Resolve the fixed topics' schemas; a registry down now is only logged. */
  start(logger: Logger): Promise<void>;
  /** The step a tenant's relay is given (RelayResources.encoding). */
  forTenant(tenant: string): EncodingStep;
  close(): Promise<void>;
}

/**
 * What the tenant relay cannot do with these encodings, as a ConfigError, or undefined.
 * A rule's `outbox` names no tenant (rules select a tenant's rows by its topic), and an
 * encoded key is the key column's alone, so the key template must be `{key}`.
 */
export function tenantEncodingProblem(encodings: ResolvedEncodingOptions, naming: TenantNaming): ConfigError | undefined {
  const byOutbox = encodings.rules.findIndex((r) => r.outbox !== undefined);
  if (byOutbox >= 0) {
    return new ConfigError(`encodings.rules[${byOutbox}].outbox`, "selects an outbox, but under a tenant rule the outboxes are tenants: select a tenant's rows by its topic (the topic template names it)");
  }
  const withKey = encodings.rules.findIndex((r) => r.key !== undefined);
  if (withKey >= 0 && naming.keyTemplate !== '{key}') {
    return new ConfigError('keyTemplate', `is ${JSON.stringify(naming.keyTemplate)}, but encodings.rules[${withKey}] encodes keys: an encoded key is the key column's value alone, so the key template must be "{key}"`);
  }
  return undefined;
}

export function createTenantEncoding(encodings: ResolvedEncodingOptions, naming: TenantNaming): TenantEncoding {
  const encoder = createRowEncoder(encodings, { outbox: undefined });
  return {
    start: (logger) => encoderStep(encoder).start(logger),
    // A relay neither starts nor closes a step it is given: this one's start and close are never called.
    forTenant: (tenant) => encoderStep(encoder, (topic) => tenantTopic(naming, tenant, topic)),
    close: () => encoder.close(),
  };
}
