import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { SchemaRegistryAPIClient, SchemaRegistryAPIClientArgs } from '@kafkajs/confluent-schema-registry/dist/api/index.js';
import { schemaRegistryApi } from './libraries.js';
import type { OutboxError } from '../shared/errors.js';
import { REGISTRY_SCHEMA_TYPES, type RegistryFormat } from './codec.js';
import { IncompatibleSchemaError, RegistryRequestError, RegistryUnavailableError, UnknownSchemaError } from './errors.js';
import type { ResolvedSchemaRegistryOptions } from './registryOptions.js';

// The REST client of @kafkajs/confluent-schema-registry (its endpoints, basic auth, agent,
// middlewares), without its SchemaRegistry class: that one changes a subject's
// compatibility on first registration and refuses to register under any other level
// than the one it was told, which is the registry's governance, not the relay's.

const ARTICLE: Record<RegistryFormat, string> = { avro: 'an Avro', protobuf: 'a Protobuf', 'json-schema': 'a JSON Schema' };

/** A schema as the registry holds it. */
export interface RegistrySchema {
  schema: string;
  /** Absent for Avro (the registry's default). */
  schemaType: string | undefined;
}

/** The registry calls encodings make; every failure is one of ./errors.ts. */
export interface RegistryClient {
  /** Register a schema under a subject (or find it there); its id. Cached per subject and text. */
  register(subject: string, format: RegistryFormat, text: string): Promise<number>;
  /** The id of a schema already registered under a subject, or undefined when it is not. Cached when found. */
  lookup(subject: string, format: RegistryFormat, text: string): Promise<number | undefined>;
  /** A subject's version (a number or `latest`), or undefined when the subject or version does not exist. */
  version(subject: string, version: number | 'latest'): Promise<(RegistrySchema & { id: number; version: number }) | undefined>;
  /**
   * The schema of an id. Cached; concurrent calls for one id share a request.
   * @throws UnknownSchemaError when the registry does not know the id
   */
  schemaById(id: number): Promise<RegistrySchema>;
  close(): Promise<void>;
}

/** The error the package's error middleware throws for a non-2xx answer or a transport failure. */
interface ResponseError extends Error {
  status?: number;
}

export function createRegistryClient(options: ResolvedSchemaRegistryOptions): RegistryClient {
  const agent = options.url.startsWith('https:')
    ? new HttpsAgent({ keepAlive: true, ...(options.ca !== undefined ? { ca: options.ca } : {}) })
    : new HttpAgent({ keepAlive: true });
  const middlewares: NonNullable<SchemaRegistryAPIClientArgs['middlewares']> = [];
  if (options.bearerToken !== undefined) {
    const authorization = `Bearer ${options.bearerToken}`;
    middlewares.push(() => ({ request: (request) => request.enhance({ headers: { authorization } }) }));
  }
  const api = schemaRegistryApi()({
    host: options.url,
    clientId: 'outbox-relay',
    // No retries inside a call: the relay retries a batch, the consumer a chunk, and a
    // call must end within timeoutMs.
    retry: { retries: 0 },
    agent,
    ...(options.username !== undefined ? { auth: { username: options.username, password: options.password ?? '' } } : {}),
    middlewares,
  });
  const registered = new Map<string, Promise<number>>();
  const byId = new Map<number, Promise<RegistrySchema>>();
  const fixedVersions = new Map<string, RegistrySchema & { id: number; version: number }>();
  let closed = false;
  // Registrations go one at a time: Apicurio 2.4 (H2 storage) answers 500 to concurrent
  // ones (lock timeouts, duplicate content ids), and there are only a few, once each.
  let registering: Promise<unknown> = Promise.resolve();
  const oneAtATime = <T>(run: () => Promise<T>): Promise<T> => {
    const next = registering.then(run, run);
    registering = next.catch(() => undefined);
    return next;
  };

  /**
   * One call within the whole-request deadline; failures classified. `special` turns a
   * status into the caller's error, or into `undefined` ("not there") when it returns null.
   */
  async function call<T>(
    what: string,
    run: (params: { timeout: number; signal: AbortSignal }) => Promise<{ data(): T }>,
    special: (error: ResponseError) => OutboxError | null | undefined = () => undefined,
  ): Promise<T | undefined> {
    if (closed) throw new RegistryUnavailableError(`the schema registry client is closed (${what})`);
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, options.timeoutMs);
    try {
      const response = await run({ timeout: options.timeoutMs, signal: controller.signal });
      return response.data();
    } catch (error) {
      if (timedOut) {
        throw new RegistryUnavailableError(`the schema registry did not answer within ${options.timeoutMs} ms (${what})`, { url: options.url }, error);
      }
      const e = error as ResponseError;
      const mapped = special(e);
      if (mapped === null) return undefined;
      throw mapped ?? classifyRegistryError(e, what, options.url);
    } finally {
      clearTimeout(timer);
    }
  }

  const body = (format: RegistryFormat, text: string): Record<string, unknown> =>
    format === 'avro' ? { schema: text } : { schemaType: REGISTRY_SCHEMA_TYPES[format], schema: text };
  const once = <K, V>(cache: Map<K, Promise<V>>, key: K, load: () => Promise<V>): Promise<V> => {
    let pending = cache.get(key);
    if (!pending) {
      pending = load();
      cache.set(key, pending);
      // A failure is not kept: the next call asks again.
      pending.catch(() => cache.delete(key));
    }
    return pending;
  };

  return {
    register(subject, format, text) {
      return once(registered, `${subject}\u0000${format}\u0000${text}`, async () => {
        const data = await oneAtATime(() => call<{ id: number }>(
          `registering ${ARTICLE[format]} schema under subject ${subject}`,
          (params) => api.Subject.register({ subject, body: body(format, text), ...params }),
          (e) => (e.status === 409 ? new IncompatibleSchemaError(subject, `the schema registry refused the ${format} schema as incompatible with subject ${subject}: ${registryMessage(e)}`, e) : undefined),
        ));
        return schemaId(data, subject);
      });
    },
    async lookup(subject, format, text) {
      const key = `${subject}\u0000${format}\u0000${text}`;
      const known = registered.get(key);
      if (known) return known;
      const data = await call<{ id: number } | undefined>(
        `looking up ${ARTICLE[format]} schema under subject ${subject}`,
        (params) => api.Subject.registered({ subject, body: body(format, text), ...params }),
        // Not registered there (40403), or no such subject (40401).
        (e) => (e.status === 404 ? null : undefined),
      );
      if (data === undefined) return undefined;
      const id = schemaId(data, subject);
      registered.set(key, Promise.resolve(id));
      return id;
    },
    async version(subject, version) {
      const key = `${subject}\u0000${version}`;
      const cached = fixedVersions.get(key);
      if (cached) return cached;
      const data = await call<{ id: number; version: number; schema: string; schemaType?: string }>(
        `reading version ${version} of subject ${subject}`,
        (params) => api.Subject.version({ subject, version, ...params }),
        (e) => (e.status === 404 ? null : undefined),
      );
      if (data === undefined) return undefined;
      const found = { id: schemaId(data, subject), version: data.version, schema: data.schema, schemaType: data.schemaType };
      // A numbered version never changes; `latest` does, the caller decides how long to keep it.
      if (version !== 'latest') fixedVersions.set(key, found);
      return found;
    },
    schemaById(id) {
      return once(byId, id, async () => {
        const data = await call<{ schema: string; schemaType?: string }>(
          `reading schema ${id}`,
          (params) => api.Schema.find({ id, ...params }),
          (e) => (e.status === 404 ? new UnknownSchemaError(id, `the schema registry knows no schema with id ${id}`, e) : undefined),
        );
        if (typeof data?.schema !== 'string') throw new RegistryUnavailableError(`the schema registry answered schema ${id} without its text`);
        return { schema: data.schema, schemaType: data.schemaType };
      });
    },
    async close() {
      closed = true;
      agent.destroy();
    },
  };
}

function schemaId(data: { id: number } | undefined, subject: string): number {
  if (!data || !Number.isSafeInteger(data.id)) throw new RegistryUnavailableError(`the schema registry answered for subject ${subject} without a schema id`);
  return data.id;
}

/** The registry's own words, without the client's name in front; at most 300 characters. */
function registryMessage(error: ResponseError): string {
  const text = (error.message ?? '').replace(/^outbox-relay - /, '');
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

/**
 * A failed registry call as one of ./errors.ts: the registry unreachable or overloaded is
 * retriable, an answer no retry changes is not.
 */
export function classifyRegistryError(error: ResponseError, what: string, url: string): OutboxError {
  const status = typeof error.status === 'number' ? error.status : undefined;
  const words = registryMessage(error);
  // The package reports a transport failure (refused, reset, DNS) as status 400 with
  // no registry body: "Error, status 400: connect ECONNREFUSED ...". A registry's own 400
  // carries a JSON message instead.
  if (status === undefined || (status === 400 && /^Error, status 400: /.test(words))) {
    const reason = words.replace(/^Error, status 400: /, '');
    // Retriable like any failed connection (a certificate can be renewed), but the usual
    // cause is a private certificate authority the relay was not told about.
    const hint = url.startsWith('https:') && /certificate|CERT_/i.test(reason) ? '; for a private certificate authority, name its PEM file in schemaRegistry.caFile' : '';
    return new RegistryUnavailableError(`the schema registry at ${url} is unreachable (${what}): ${reason}${hint}`, { url }, error);
  }
  if (status >= 500 || status === 429 || status === 408) {
    return new RegistryUnavailableError(`the schema registry answered HTTP ${status} (${what}): ${words}`, { url, status }, error);
  }
  if (status === 401 || status === 403) {
    return new RegistryRequestError(status, `the schema registry refused the credentials (HTTP ${status}) (${what})`, { url }, error);
  }
  if (status === 422) {
    return new RegistryRequestError(status, `the schema registry refused the schema as invalid (${what}): ${words}`, { url }, error);
  }
  return new RegistryRequestError(status, `the schema registry answered HTTP ${status} (${what}): ${words}`, { url }, error);
}
