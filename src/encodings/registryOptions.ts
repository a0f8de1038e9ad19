import { readFileSync } from 'node:fs';
import { ConfigError } from '../shared/errors.js';

/** How to reach a Confluent-compatible schema registry. */
export interface SchemaRegistryOptions {
  /** The API's base URL, e.g. `http://registry:8081` or Apicurio's `http://registry:8080/apis/ccompat/v7`. */
  url: string;
  /** HTTP basic auth, with `password`. */
  username?: string;
  /** A secret: never logged, never in a message. */
  password?: string;
  /** Sent as `Authorization: Bearer <token>` (not with username/password). A secret. */
  bearerToken?: string;
  /** PEM file of the certificate authorities to trust for an https URL (default: Node's). */
  caFile?: string;
  /** Longest wait for one request, in ms (default 10 000). */
  timeoutMs?: number;
}

const RESOLVED: unique symbol = Symbol('outbox-relay.resolvedSchemaRegistry');

export interface ResolvedSchemaRegistryOptions extends SchemaRegistryOptions {
  readonly [RESOLVED]: true;
  /** Without a trailing slash. */
  url: string;
  timeoutMs: number;
  /** caFile's text, read once. */
  ca: string | undefined;
}

export const DEFAULT_REGISTRY_TIMEOUT_MS = 10_000;
const KEYS = new Set(['url', 'username', 'password', 'bearerToken', 'caFile', 'timeoutMs']);

/**
 * Check registry options: the URL, credentials that go together, the CA file read. Options
 * already resolved come back as they are.
 *
 * @throws ConfigError naming `${setting}.<option>`; never quoting a secret
 */
export function resolveSchemaRegistryOptions(input: unknown, setting = 'schemaRegistry'): ResolvedSchemaRegistryOptions {
  if (typeof input === 'object' && input !== null && (input as Partial<ResolvedSchemaRegistryOptions>)[RESOLVED] === true) {
    return input as ResolvedSchemaRegistryOptions;
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new ConfigError(setting, 'is not an object');
  const o = input as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!KEYS.has(key)) throw new ConfigError(`${setting}.${key}`, `is not an option here (known: ${[...KEYS].join(', ')})`);
  }
  if (typeof o.url !== 'string' || o.url.trim() === '') throw new ConfigError(`${setting}.url`, 'is required: the registry API\'s base URL');
  let url: URL;
  try {
    url = new URL(o.url.trim());
  } catch {
    throw new ConfigError(`${setting}.url`, 'is not a URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError(`${setting}.url`, `is not an http or https URL (${url.protocol})`);
  // A URL is logged and shown; credentials have options of their own.
  if (url.username || url.password) throw new ConfigError(`${setting}.url`, 'carries credentials: set username and password (or bearerToken) instead');
  if (url.search || url.hash) throw new ConfigError(`${setting}.url`, 'has a query or fragment; give the API\'s base URL');
  for (const name of ['username', 'password', 'bearerToken', 'caFile'] as const) {
    if (o[name] !== undefined && (typeof o[name] !== 'string' || o[name] === '')) throw new ConfigError(`${setting}.${name}`, 'is not text');
  }
  const username = o.username as string | undefined;
  const password = o.password as string | undefined;
  const bearerToken = o.bearerToken as string | undefined;
  if ((username === undefined) !== (password === undefined)) {
    throw new ConfigError(`${setting}.${username === undefined ? 'username' : 'password'}`, 'is required with the other one: basic auth takes both username and password');
  }
  if (bearerToken !== undefined && username !== undefined) throw new ConfigError(`${setting}.bearerToken`, 'and username/password are both set; set one');
  let timeoutMs = DEFAULT_REGISTRY_TIMEOUT_MS;
  if (o.timeoutMs !== undefined) {
    if (!Number.isSafeInteger(o.timeoutMs) || (o.timeoutMs as number) < 100 || (o.timeoutMs as number) > 600_000) {
      throw new ConfigError(`${setting}.timeoutMs`, `${JSON.stringify(o.timeoutMs)} is not a whole number from 100 to 600000`);
    }
    timeoutMs = o.timeoutMs as number;
  }
  let ca: string | undefined;
  const caFile = o.caFile as string | undefined;
  if (caFile !== undefined) {
    if (url.protocol !== 'https:') throw new ConfigError(`${setting}.caFile`, 'applies to an https URL only');
    try {
      ca = readFileSync(caFile, 'utf8');
    } catch (error) {
      throw new ConfigError(`${setting}.caFile`, `cannot read ${caFile}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
    }
  }
  return {
    [RESOLVED]: true,
    url: url.href.replace(/\/+$/, ''),
    ...(username !== undefined ? { username, password } : {}),
    ...(bearerToken !== undefined ? { bearerToken } : {}),
    ...(caFile !== undefined ? { caFile } : {}),
    timeoutMs,
    ca,
  };
}
