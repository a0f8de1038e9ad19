import type pg from 'pg';
import { quoteIdentifier } from '../shared/identifiers.js';
import { OutboxError } from '../shared/errors.js';
import { advanceVersionSql } from './sql/entityVersions.js';

/** What {@link advanceEntityVersion} gates: which entity, in which scope, at which version. */
export interface AdvanceVersionOptions {
  /** Schema of the entity_versions table (default `public`). */
  schema?: string;
  /** Namespace of the entity names; the consumer passes its group id. */
  scope: string;
  /** The entity, e.g. `account:42`. */
  entity: string;
  /** The event's version of the entity: an integer, newer is larger. */
  version: number | bigint | string;
}

/**
 * The version gate: record `version` as the entity's newest and return true when it is
 * newer than the stored one (apply the event), or return false and change nothing when it
 * is not (a stale event delivered after a newer one: skip it).
 *
 * Call it inside the transaction that applies the event. The entity's row stays locked
 * until that transaction ends, so concurrent handlers of one entity are serialized, and
 * a rollback takes the new version back together with the effects.
 *
 * Inside a consumer handler use `context.advanceVersion()`, which also counts stale events.
 * With a version column in your own table, gate on it directly instead
 * (`UPDATE ... WHERE id = $1 AND version < $2`) and call `context.markStale()` when no row
 * changed.
 */
export async function advanceEntityVersion(client: pg.ClientBase, options: AdvanceVersionOptions): Promise<boolean> {
  const version = toVersion(options.version);
  const { rowCount } = await client.query(advanceVersionSql(quoteIdentifier(options.schema ?? 'public', 'schema')), [
    options.scope,
    options.entity,
    version,
  ]);
  return rowCount === 1;
}

function toVersion(value: number | bigint | string): string {
  const text = typeof value === 'string' ? value.trim() : String(value);
  if (!/^-?\d{1,19}$/.test(text) || BigInt(text) > 9223372036854775807n || BigInt(text) < -9223372036854775808n) {
    throw new OutboxError(`version gate: ${JSON.stringify(String(value))} is not a 64-bit integer`, {
      retriable: false,
      context: { version: String(value) },
    });
  }
  return text;
}
