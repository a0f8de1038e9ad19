import { ConfigError } from './errors.js';

// Deliberately narrower than what Postgres accepts: a name from configuration that needs
// quoting tricks is far more likely to be a mistake or an attack than a real schema.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** The schema every API uses when none is given. */
export const DEFAULT_SCHEMA = 'public';

/** What is wrong with an SQL identifier from configuration, or undefined when it is fine. */
export function identifierProblem(value: string): string | undefined {
  return typeof value === 'string' && IDENTIFIER.test(value)
    ? undefined
    : `${JSON.stringify(value)} is not a valid name (1-63 letters, digits or underscores, not starting with a digit)`;
}

/**
 * Validate an SQL identifier taken from configuration (a schema name, for example) and
 * return it quoted, ready to splice into SQL text.
 *
 * @param setting the setting's name, used in the error message
 * @throws ConfigError when the name is not 1-63 letters, digits or underscores, starting
 *   with a letter or underscore
 */
export function quoteIdentifier(value: string, setting = 'identifier'): string {
  const problem = identifierProblem(value);
  if (problem) throw new ConfigError(setting, problem);
  return `"${value}"`;
}

/** The schema option of any API (default `public`), validated and quoted. */
export function quoteSchema(schema: string | undefined): string {
  return quoteIdentifier(schema ?? DEFAULT_SCHEMA, 'schema');
}
