/**
 * The outboxes one relay process serves, from a JSON file or from the environment.
 *
 * File (`--outboxes-file`, env OUTBOX_OUTBOXES_FILE):
 *
 *   { "outboxes": [
 *       { "name": "orders",  "databaseUrlEnv": "ORDERS_DATABASE_URL", "schema": "public" },
 *       { "name": "tenant_a", "databaseUrlFile": "/run/secrets/tenants-db", "schema": "tenant_a" } ] }
 *
 * Environment (OUTBOX_OUTBOXES=orders,tenant_a): for each name N, OUTBOX_<N>_DATABASE_URL
 * or OUTBOX_<N>_DATABASE_URL_FILE, and optionally OUTBOX_<N>_SCHEMA,
 * OUTBOX_<N>_BATCHES_IN_FLIGHT and OUTBOX_<N>_DELIVERY (N upper-cased).
 *
 * Both forms refuse what they do not know (a top-level key beside `outboxes`, a field of
 * an entry, an OUTBOX_<N>_* variable): a typo must not fall back to a default in silence
 * (OUTBOX_ORDERS_SHEMA would relay schema public).
 *
 * The connection string is a secret: it comes from an environment variable or a file the
 * entry names. A literal `databaseUrl` in the file is accepted only without a password
 * (a file of this kind tends to live in a ConfigMap or a repository). No message here
 * ever quotes a connection string, nor any of the file's text: pointed by mistake at a
 * secret, the error must not print it.
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.js';
import { databaseUrlProblem, describeDatabase } from './database.js';
import { DEFAULT_SCHEMA, schemaNameProblem } from './identifiers.js';

/** One outbox of a relay group. */
export interface OutboxDefinition {
  /** Names the outbox in logs, the `outbox` metric label, /readyz and operator commands. */
  name: string;
  /** PostgreSQL connection string (resolved from the environment or a file). */
  databaseUrl: string;
  /** Schema of the outbox tables (default `public`). */
  schema: string;
  /** Batches of this outbox published at once (default: the group's batchesInFlight). */
  batchesInFlight?: number;
  /** `at-least-once` or `exactly-once` for this outbox (default: the group's delivery). */
  delivery?: 'at-least-once' | 'exactly-once';
}

/** Most outboxes one process takes: each holds its own connections, leases and loops. */
export const MAX_OUTBOXES = 64;

const NAME = /^[a-z][a-z0-9_]{0,39}$/;
const ENTRY_KEYS = new Set(['name', 'databaseUrl', 'databaseUrlEnv', 'databaseUrlFile', 'schema', 'batchesInFlight', 'delivery']);
const FILE_KEYS = new Set(['outboxes']);
/** The OUTBOX_<N>_* variables of one outbox, by suffix. */
const ENV_SUFFIXES = ['DATABASE_URL', 'DATABASE_URL_FILE', 'SCHEMA', 'BATCHES_IN_FLIGHT', 'DELIVERY'] as const;
const DELIVERIES = ['at-least-once', 'exactly-once'] as const;
const DELIVERY_ACCEPTS = 'at-least-once or exactly-once';
const BATCHES_IN_FLIGHT_ACCEPTS = 'a whole number from 1 to 64';
/**
 * Kubernetes' service links: a Service named `outbox-orders` puts OUTBOX_ORDERS_SERVICE_HOST,
 * OUTBOX_ORDERS_PORT, OUTBOX_ORDERS_PORT_9464_TCP, … into every pod of its namespace.
 */
const SERVICE_LINK = /^(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\w+)?)$/;

/** What is wrong with an outbox name, or undefined. */
function outboxNameProblem(name: unknown): string | undefined {
  return typeof name === 'string' && NAME.test(name)
    ? undefined
    : `${JSON.stringify(name)} is not an outbox name (1-40 lower-case letters, digits or underscores, starting with a letter)`;
}

/**
 * Check a list of outboxes: names valid and unique, connection strings well-formed, no
 * two entries whose URLs name the same host, port, database and schema, at most
 * {@link MAX_OUTBOXES}. Only the text is compared here, before anything connects; the
 * relay group compares the servers the URLs reach at start (src/relay/outboxPlace.ts).
 *
 * @param setting names the source in errors (the file or the variable)
 * @throws ConfigError
 */
export function checkOutboxList(list: readonly OutboxDefinition[], setting = 'outboxes'): OutboxDefinition[] {
  if (!Array.isArray(list) || list.length === 0) throw new ConfigError(setting, 'needs at least one outbox');
  if (list.length > MAX_OUTBOXES) throw new ConfigError(setting, `has ${list.length} outboxes; one process takes at most ${MAX_OUTBOXES} (run several)`);
  const names = new Set<string>();
  const places = new Map<string, string>();
  return list.map((o, i) => {
    const where = `${setting}[${i}]`;
    const nameProblem = outboxNameProblem(o.name);
    if (nameProblem) throw new ConfigError(`${where}.name`, nameProblem);
    if (names.has(o.name)) throw new ConfigError(`${where}.name`, `${JSON.stringify(o.name)} is given twice`);
    names.add(o.name);
    if (typeof o.databaseUrl !== 'string') throw new ConfigError(`${where}.databaseUrl`, 'is required');
    const urlProblem = databaseUrlProblem(o.databaseUrl);
    if (urlProblem) throw new ConfigError(`outbox ${o.name}: database URL`, urlProblem);
    const schema = o.schema ?? DEFAULT_SCHEMA;
    const schemaProblem = schemaNameProblem(schema);
    if (schemaProblem) throw new ConfigError(`outbox ${o.name}: schema`, schemaProblem);
    const place = `${describeDatabase(o.databaseUrl)} ${schema}`;
    const other = places.get(place);
    if (other) throw new ConfigError(`outbox ${o.name}`, `is the same database and schema as outbox ${other} (${place})`);
    places.set(place, o.name);
    if (o.batchesInFlight !== undefined && !(Number.isInteger(o.batchesInFlight) && o.batchesInFlight >= 1 && o.batchesInFlight <= 64)) {
      throw new ConfigError(`outbox ${o.name}: batchesInFlight`, `${JSON.stringify(o.batchesInFlight)} is not ${BATCHES_IN_FLIGHT_ACCEPTS}`);
    }
    if (o.delivery !== undefined && !(DELIVERIES as readonly unknown[]).includes(o.delivery)) {
      throw new ConfigError(`outbox ${o.name}: delivery`, `${JSON.stringify(o.delivery)} is not ${DELIVERY_ACCEPTS}`);
    }
    return {
      name: o.name,
      databaseUrl: o.databaseUrl,
      schema,
      ...(o.batchesInFlight !== undefined ? { batchesInFlight: o.batchesInFlight } : {}),
      ...(o.delivery !== undefined ? { delivery: o.delivery } : {}),
    };
  });
}

function readSecretFile(path: string, setting: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (error) {
    throw new ConfigError(setting, `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
}

function hasPassword(url: string): boolean {
  try {
    return new URL(url).password !== '';
  } catch {
    return false;
  }
}

/**
 * Parse the text of an outboxes file (JSON, see the module comment).
 *
 * @param file the file's path, for error messages
 * @throws ConfigError naming the entry and field at fault
 */
export function parseOutboxesFile(text: string, file: string, env: NodeJS.ProcessEnv): OutboxDefinition[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the text around the fault: the file may be a secret
    // file named by mistake, so say where, never what.
    throw new ConfigError(file, `is not JSON (${jsonFaultPlace(text)}; the content is not shown)`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new ConfigError(file, 'is not a JSON object with an "outboxes" list');
  const extra = Object.keys(doc).filter((k) => !FILE_KEYS.has(k));
  if (extra.length > 0) {
    throw new ConfigError(file, `has unknown top-level key ${JSON.stringify(extra[0])} (known: outboxes; every other setting is a flag or variable of the command, the same for all outboxes)`);
  }
  const entries = (doc as { outboxes?: unknown }).outboxes;
  if (!Array.isArray(entries)) throw new ConfigError(file, 'needs an "outboxes" list');
  const list = entries.map((entry: unknown, i): OutboxDefinition => {
    const where = `${file}: outboxes[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw new ConfigError(where, 'is not an object');
    const e = entry as Record<string, unknown>;
    const unknown = Object.keys(e).filter((k) => !ENTRY_KEYS.has(k));
    if (unknown.length > 0) throw new ConfigError(where, `has unknown field ${unknown[0]} (known: ${[...ENTRY_KEYS].join(', ')})`);
    const sources = (['databaseUrl', 'databaseUrlEnv', 'databaseUrlFile'] as const).filter((k) => e[k] !== undefined);
    if (sources.length !== 1) throw new ConfigError(where, 'needs exactly one of databaseUrlEnv, databaseUrlFile or databaseUrl');
    const source = sources[0]!;
    if (typeof e[source] !== 'string' || e[source] === '') throw new ConfigError(`${where}.${source}`, 'is not a non-empty string');
    let databaseUrl: string;
    if (source === 'databaseUrlEnv') {
      const value = env[e.databaseUrlEnv as string];
      if (value === undefined || value === '') throw new ConfigError(`${where}.databaseUrlEnv`, `names ${e.databaseUrlEnv as string}, which is not set`);
      databaseUrl = value.trim();
    } else if (source === 'databaseUrlFile') {
      databaseUrl = readSecretFile(e.databaseUrlFile as string, `${where}.databaseUrlFile`);
    } else {
      databaseUrl = (e.databaseUrl as string).trim();
      if (hasPassword(databaseUrl)) {
        throw new ConfigError(`${where}.databaseUrl`, 'holds a password: put the URL in an environment variable (databaseUrlEnv) or a file (databaseUrlFile) instead');
      }
    }
    if (e.schema !== undefined && typeof e.schema !== 'string') throw new ConfigError(`${where}.schema`, 'is not a string');
    return {
      name: e.name as string,
      databaseUrl,
      schema: (e.schema as string | undefined) ?? DEFAULT_SCHEMA,
      ...(e.batchesInFlight !== undefined ? { batchesInFlight: e.batchesInFlight as number } : {}),
      ...(e.delivery !== undefined ? { delivery: e.delivery as OutboxDefinition['delivery'] } : {}),
    };
  });
  return checkOutboxList(list, `${file}: outboxes`);
}

/**
 * Read the outboxes from OUTBOX_OUTBOXES and its per-outbox variables (see the module comment).
 *
 * @param otherVariables variables of other settings, not to be taken for a listed
 *   outbox's unknown OUTBOX_<N>_* variable
 * @throws ConfigError naming the variable at fault
 */
export function outboxesFromEnvironment(env: NodeJS.ProcessEnv, otherVariables: ReadonlySet<string> = new Set()): OutboxDefinition[] {
  const names = (env.OUTBOX_OUTBOXES ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '');
  const list = names.map((name): OutboxDefinition => {
    const problem = outboxNameProblem(name);
    if (problem) throw new ConfigError('OUTBOX_OUTBOXES', problem);
    const prefix = `OUTBOX_${name.toUpperCase()}_`;
    const direct = env[`${prefix}DATABASE_URL`];
    const file = env[`${prefix}DATABASE_URL_FILE`];
    if (direct && file) throw new ConfigError(`${prefix}DATABASE_URL`, `and ${prefix}DATABASE_URL_FILE are both set; set one`);
    let databaseUrl: string;
    if (direct) databaseUrl = direct.trim();
    else if (file) databaseUrl = readSecretFile(file, `${prefix}DATABASE_URL_FILE`);
    else throw new ConfigError(`${prefix}DATABASE_URL`, `is required for outbox ${name} (or ${prefix}DATABASE_URL_FILE)`);
    const inFlight = env[`${prefix}BATCHES_IN_FLIGHT`];
    if (inFlight !== undefined && inFlight !== '' && !(/^\d+$/.test(inFlight.trim()) && Number(inFlight) >= 1 && Number(inFlight) <= 64)) {
      throw new ConfigError(`${prefix}BATCHES_IN_FLIGHT`, `${JSON.stringify(inFlight)} is not ${BATCHES_IN_FLIGHT_ACCEPTS}`);
    }
    const delivery = env[`${prefix}DELIVERY`]?.trim();
    if (delivery && !(DELIVERIES as readonly string[]).includes(delivery)) {
      throw new ConfigError(`${prefix}DELIVERY`, `${JSON.stringify(delivery)} is not ${DELIVERY_ACCEPTS}`);
    }
    const schema = env[`${prefix}SCHEMA`] || DEFAULT_SCHEMA;
    const schemaProblem = schemaNameProblem(schema);
    if (schemaProblem) throw new ConfigError(`${prefix}SCHEMA`, schemaProblem);
    return {
      name,
      databaseUrl,
      schema,
      ...(inFlight ? { batchesInFlight: Number(inFlight) } : {}),
      ...(delivery ? { delivery: delivery as OutboxDefinition['delivery'] } : {}),
    };
  });
  refuseUnknownVariables(names, env, otherVariables);
  return checkOutboxList(list, 'OUTBOX_OUTBOXES');
}

/**
 * An OUTBOX_<N>_* variable of a listed outbox that is none of its own: a typo
 * (OUTBOX_ORDERS_SHEMA) would otherwise leave the default in place without a word.
 * Variables of other settings that happen to share the prefix (an outbox named `batch`
 * and OUTBOX_BATCH_SIZE) are passed in `otherVariables`; Kubernetes' service links pass.
 */
function refuseUnknownVariables(names: readonly string[], env: NodeJS.ProcessEnv, otherVariables: ReadonlySet<string>): void {
  const own = new Set(names.flatMap((n) => ENV_SUFFIXES.map((suffix) => `OUTBOX_${n.toUpperCase()}_${suffix}`)));
  for (const name of names) {
    const prefix = `OUTBOX_${name.toUpperCase()}_`;
    const unknown = Object.keys(env)
      .filter((k) => k.startsWith(prefix) && !own.has(k) && !otherVariables.has(k) && !SERVICE_LINK.test(k.slice(prefix.length)))
      .sort();
    if (unknown.length > 0) {
      throw new ConfigError(unknown[0]!, `is not a variable of outbox ${name} (known: ${ENV_SUFFIXES.map((s) => prefix + s).join(', ')})`);
    }
  }
}

/** Line and column of the first JSON syntax error in `text` (from JSON.parse's position, when it gives one). */
function jsonFaultPlace(text: string): string {
  if (text.trim() === '') return 'the file is empty';
  try {
    JSON.parse(text);
  } catch (error) {
    const m = /position (\d+)/.exec((error as Error).message);
    if (m) {
      const before = text.slice(0, Number(m[1]));
      const line = before.split('\n').length;
      return `syntax error at line ${line}, column ${before.length - before.lastIndexOf('\n')}`;
    }
  }
  return 'syntax error';
}

/**
 * The outboxes of this process: from `file` when given, else from OUTBOX_OUTBOXES_FILE,
 * else from OUTBOX_OUTBOXES; undefined when none of them is set (one outbox, DATABASE_URL).
 *
 * @param fileSetting what to call `file` in errors (the flag or variable it came from)
 * @param otherVariables see {@link outboxesFromEnvironment}
 * @throws ConfigError
 */
export function readOutboxList(
  file: string | undefined,
  env: NodeJS.ProcessEnv,
  { fileSetting = file !== undefined ? '--outboxes-file' : 'OUTBOX_OUTBOXES_FILE', otherVariables = new Set<string>() }: { fileSetting?: string; otherVariables?: ReadonlySet<string> } = {},
): OutboxDefinition[] | undefined {
  const path = file ?? (env.OUTBOX_OUTBOXES_FILE || undefined);
  if (path !== undefined) {
    if (env.OUTBOX_OUTBOXES) throw new ConfigError('OUTBOX_OUTBOXES', `and an outboxes file (${path}) are both set; use one`);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      throw new ConfigError(fileSetting, `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
    }
    return parseOutboxesFile(text, path, env);
  }
  if (env.OUTBOX_OUTBOXES) return outboxesFromEnvironment(env, otherVariables);
  return undefined;
}
