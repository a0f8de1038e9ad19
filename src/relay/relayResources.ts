import type { MessageProducer } from './messageProducer.js';
import type { EncodingStep } from './encodingStep.js';

/**
 * What a relay may be given instead of making its own: the tenant relay (src/tenants/)
 * shares one producer and one encoder among the relays of its tenants. What is given is
 * not closed by the relay's stop; its owner closes it.
 */
export interface RelayResources {
  /** Publishes the relay's messages; at-least-once mode only. */
  producer?: MessageProducer;
  /**
   * The schema was found migrated and intact by an earlier relay of this owner: start
   * without checking it again (the tenant relay starts a tenant's relay at every turn).
   */
  schemaChecked?: boolean;
  /**
   * The outbox's name in its owner's list (a relay group's outbox `name`): encodings'
   * rules select rows by it (`outbox`). Default: the schema.
   */
  outboxName?: string;
  /**
   * Encodes the rows instead of a step of the relay's own from its `encodings` (the tenant
   * relay's one encoder for every tenant, its registry lookups cached across tenants and
   * turns). Neither started nor closed by the relay.
   */
  encoding?: EncodingStep;
}
