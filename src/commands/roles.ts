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
  /** Name of the console's read-only group role (default `outbox_viewer`). */
  viewerRole?: string;
  /** Name of the console's group role that may also replay, discard and unpark (default `outbox_operator`). */
  operatorRole?: string;
}

/**
 * sql/roles.sql with the schema and role names filled in: least-privilege roles for the
 * relay, the consumer, and the console's viewer and operator, for a DBA to read and apply as the tables' owner (psql -f).
 *
 * @throws ConfigError when a name is not a plain identifier
 */
export async function roleScript(schema = DEFAULT_SCHEMA, options: RoleScriptOptions = {}): Promise<string> {
  const text = await readFile(ROLES_SQL, 'utf8');
  return text
    .replaceAll(':"schema"', quoteSchema(schema))
    .replaceAll(':"relay_role"', quoteIdentifier(options.relayRole ?? 'outbox_relay', 'relayRole'))
    .replaceAll(':"consumer_role"', quoteIdentifier(options.consumerRole ?? 'outbox_consumer', 'consumerRole'))
    .replaceAll(':"viewer_role"', quoteIdentifier(options.viewerRole ?? 'outbox_viewer', 'viewerRole'))
    .replaceAll(':"operator_role"', quoteIdentifier(options.operatorRole ?? 'outbox_operator', 'operatorRole'));
}
