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

/**
 * What is wrong with a schema name from configuration, or undefined. Stricter than
 * {@link identifierProblem}: no upper-case letters. The relay quotes the name, so
 * `migrate --schema Mb` would create the case-sensitive schema "Mb", which the unquoted
 * SQL writers use (`INSERT INTO Mb.outbox`, `SET search_path TO Mb`) never reaches:
 * Postgres folds unquoted names to lower case and looks in `mb`.
 */
export function schemaNameProblem(value: string): string | undefined {
  const problem = identifierProblem(value);
  if (problem) return problem;
  if (value !== value.toLowerCase()) {
    return `${JSON.stringify(value)} has upper-case letters: Postgres folds unquoted names to lower case, so an unquoted INSERT INTO ${value}.outbox would look in ${value.toLowerCase()}, not in the schema "${value}"; use ${JSON.stringify(value.toLowerCase())}`;
  }
  return undefined;
}

/**
 * The schema option of any API (default `public`), validated ({@link schemaNameProblem})
 * and quoted.
 *
 * @throws ConfigError naming `schema`
 */
export function quoteSchema(schema: string | undefined): string {
  const value = schema ?? DEFAULT_SCHEMA;
  const problem = schemaNameProblem(value);
  if (problem) throw new ConfigError('schema', problem);
  return `"${value}"`;
}
