import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { DEFAULT_SCHEMA, quoteIdentifier, quoteSchema } from '../shared/identifiers.js';

const ROLES_SQL = fileURLToPath(new URL('../../sql/roles.sql', import.meta.url));

/** Names of the roles {@link roleScript} creates. */
export interface RoleScriptOptions {
  /** Name of the relay's group role (default `outbox_relay`). */
  relayRole?: string;
  /** Name of the consumer's group role (default `outbox_consumer`). */
  consumerRole?: string;
}

/**
 * sql/roles.sql with the schema and role names filled in: least-privilege roles for the
 * relay and the consumer, for a DBA to read and apply as the tables' owner (psql -f).
 *
 * @throws ConfigError when a name is not a plain identifier
 */
export async function roleScript(schema = DEFAULT_SCHEMA, options: RoleScriptOptions = {}): Promise<string> {
  const text = await readFile(ROLES_SQL, 'utf8');
  return text
    .replaceAll(':"schema"', quoteSchema(schema))
    .replaceAll(':"relay_role"', quoteIdentifier(options.relayRole ?? 'outbox_relay', 'relayRole'))
    .replaceAll(':"consumer_role"', quoteIdentifier(options.consumerRole ?? 'outbox_consumer', 'consumerRole'));
}
