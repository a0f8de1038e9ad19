import { ConfigError, type OutboxError } from '../shared/errors.js';
import { formatOfSchemaType, type SchemaCodec } from './codec.js';
import { schemaCodec } from './schemaCodec.js';
import { quote } from './describe.js';
import { RowEncodingError, UnknownSchemaError } from './errors.js';
import type { ResolvedEncodingOptions, ResolvedEncodingRule, ResolvedEncodingSpec } from './options.js';
import { createRegistryClient, type RegistryClient } from './registryClient.js';
import { subjectName, subjectNamesTopic, type MessagePart } from './subjects.js';
import { frame } from './wireFormat.js';

/** A row's key and value as they go to Kafka. */
export interface EncodedParts {
  /** The row's key text, or its encoded bytes when the rule has a key encoding. */
  key: string | Buffer;
  /** The encoded value; the row's JSON text when only the key is encoded; null for a tombstone. */
  value: Buffer | string | null;
  valueSchemaId?: number;
  keySchemaId?: number;
}

export interface RowEncoder {
  /**
   * Registers or looks up every file- and version-sourced schema whose subject is known
   * before any row comes (the rule names a fixed topic, or the subject names no topic).
   * Rules with a topic pattern resolve at their first row of each topic, then are kept.
   *
   * @throws IncompatibleSchemaError, RegistryUnavailableError (retriable),
   *   RegistryRequestError (credentials refused, schema invalid), ConfigError (a schema
   *   not registered where `autoRegister: false` says it is, a version that does not exist)
   */
  start(): Promise<void>;
  /**
   * A row's key and value in their rule's encodings; undefined when no rule matches the
   * outbox and topic, or the rule says json for both: the row goes out as it is. A null
   * value (tombstone) stays null.
   *
   * @throws RowEncodingError when the row does not fit (its alone: dead-letter it);
   *   RegistryUnavailableError (retriable: the row waits); for a topic pattern's first
   *   row, what {@link start} throws
   */
  encode(input: { topic: string; key: string; value: string | null; headers: Readonly<Record<string, string>> }): Promise<EncodedParts | undefined>;
  close(): Promise<void>;
}

/** A schema ready for a subject: its id and codec. */
interface Binding {
  id: number;
  codec: SchemaCodec;
  /** undefined for a schema named by a row's header. */
  subject: string | undefined;
}

/**
 * The encoder of one outbox's rows: only the rules for that outbox (or for every outbox)
 * apply, the first matching one decides. `outbox` undefined: only the rules for every outbox.
 */
export function createRowEncoder(options: ResolvedEncodingOptions, scope: { outbox: string | undefined }): RowEncoder {
  const rules = options.rules.filter((r) => r.outbox === undefined || r.outbox === scope.outbox);
  const needsRegistry = rules.some((r) => r.value || r.key);
  let client: RegistryClient | undefined;
  const registry = (): RegistryClient => {
    if (!options.schemaRegistry) throw new ConfigError('encodings.schemaRegistry', 'is required by the rules that encode through it');
    client ??= createRegistryClient(options.schemaRegistry);
    return client;
  };
  const bindings = new Map<string, Promise<Binding>>();
  const codecsById = new Map<string, SchemaCodec>();

  const codecOf = (id: number, format: ResolvedEncodingSpec['format'], text: string, messageName: string | undefined): SchemaCodec => {
    const key = `${id}\u0000${messageName ?? ''}`;
    let codec = codecsById.get(key);
    if (!codec) {
      codec = schemaCodec(format, text, messageName);
      codecsById.set(key, codec);
    }
    return codec;
  };

  /** The subject of a spec for a topic; undefined when it names a topic and none is known. */
  const subjectOf = (spec: ResolvedEncodingSpec, part: MessagePart, topic: string | undefined): string | undefined => {
    const source = spec.schema;
    if (source.kind === 'version') return source.subject ?? (topic === undefined ? undefined : `${topic}-${part}`);
    if (source.kind !== 'file') return undefined;
    if (topic === undefined && subjectNamesTopic(spec.subjectStrategy)) return undefined;
    return subjectName(spec.subjectStrategy, topic ?? '', part, source.codec.recordName);
  };

  const resolveBinding = async (spec: ResolvedEncodingSpec, subject: string): Promise<Binding> => {
    const source = spec.schema;
    if (source.kind === 'file') {
      const { codec } = source;
      if (source.autoRegister) return { id: await registry().register(subject, spec.format, codec.text), codec, subject };
      const id = await registry().lookup(subject, spec.format, codec.text);
      if (id === undefined) {
        throw new ConfigError(`${spec.setting}.schema.file`, `${source.file} is not registered under subject ${subject}, and autoRegister is false`);
      }
      return { id, codec, subject };
    }
    if (source.kind !== 'version') throw new Error('a header-named schema has no binding');
    const found = await registry().version(subject, source.version);
    if (!found) throw new ConfigError(`${spec.setting}.schema.version`, `subject ${subject} has no version ${source.version} in the schema registry`);
    const format = formatOfSchemaType(found.schemaType);
    if (format !== spec.format) {
      throw new ConfigError(`${spec.setting}.format`, `is ${spec.format}, but version ${found.version} of subject ${subject} (schema ${found.id}) is ${found.schemaType ?? 'AVRO'}`);
    }
    try {
      return { id: found.id, codec: codecOf(found.id, format, found.schema, spec.messageName), subject };
    } catch (error) {
      throw new ConfigError(`${spec.setting}.schema`, `schema ${found.id} (version ${found.version} of subject ${subject}) cannot be used: ${(error as Error).message}`);
    }
  };

  const binding = (spec: ResolvedEncodingSpec, subject: string): Promise<Binding> => {
    const key = `${spec.setting}\u0000${subject}`;
    let pending = bindings.get(key);
    if (!pending) {
      pending = resolveBinding(spec, subject);
      bindings.set(key, pending);
      // A failure is not kept: the next row asks the registry again.
      pending.catch(() => bindings.delete(key));
    }
    return pending;
  };

  /** The schema a row's header names. */
  const headerBinding = async (spec: ResolvedEncodingSpec, header: string, headers: Readonly<Record<string, string>>, part: MessagePart): Promise<Binding> => {
    const errorName = `encoding:${spec.format}`;
    const raw = headers[header];
    if (raw === undefined) throw new RowEncodingError(errorName, `${part}: the row has no header ${header} naming its ${spec.format} schema id`);
    if (!/^\d{1,10}$/.test(raw.trim())) throw new RowEncodingError(errorName, `${part}: header ${header} is ${quote(raw)}, not a schema id`);
    const id = Number(raw.trim());
    let schema;
    try {
      schema = await registry().schemaById(id);
    } catch (error) {
      if (error instanceof UnknownSchemaError) {
        throw new RowEncodingError(errorName, `${part}: header ${header} names schema ${id}, which the schema registry does not know`, { schemaId: id }, error);
      }
      throw error;
    }
    const format = formatOfSchemaType(schema.schemaType);
    if (format !== spec.format) {
      throw new RowEncodingError(errorName, `${part}: header ${header} names schema ${id}, a ${schema.schemaType ?? 'AVRO'} schema, and the rule encodes ${spec.format}`, { schemaId: id });
    }
    try {
      return { id, codec: codecOf(id, format, schema.schema, spec.messageName), subject: undefined };
    } catch (error) {
      throw new RowEncodingError(errorName, `${part}: schema ${id} (header ${header}) cannot be used: ${(error as Error).message}`, { schemaId: id }, error);
    }
  };

  const encodePart = async (spec: ResolvedEncodingSpec, part: MessagePart, text: string, topic: string, headers: Readonly<Record<string, string>>): Promise<{ bytes: Buffer; id: number }> => {
    const errorName = `encoding:${spec.format}`;
    let bound: Binding;
    if (spec.schema.kind === 'idHeader') {
      bound = await headerBinding(spec, spec.schema.idHeader, headers, part);
    } else {
      let subject: string;
      try {
        subject = subjectOf(spec, part, topic)!;
      } catch (error) {
        throw new ConfigError(`${spec.setting}.subjectStrategy`, (error as Error).message);
      }
      bound = await binding(spec, subject);
    }
    const where = `${spec.format} schema ${bound.id}${bound.subject === undefined ? '' : `, subject ${bound.subject}`}`;
    const prefix = part === 'key' ? 'key: ' : '';
    let parsed: unknown;
    if (part === 'key' && bound.codec.topIsString) {
      parsed = text;
    } else {
      try {
        parsed = JSON.parse(text);
      } catch {
        throw new RowEncodingError(errorName, `${part === 'key' ? 'key' : 'value'}: not JSON, and the ${spec.format} encoding takes JSON (${where})`, { schemaId: bound.id });
      }
    }
    const encoded = bound.codec.encode(parsed);
    if ('problem' in encoded) {
      throw new RowEncodingError(errorName, `${prefix}${encoded.problem} (${where})`, { schemaId: bound.id, ...(bound.subject ? { subject: bound.subject } : {}) });
    }
    return { bytes: frame(bound.id, encoded.body, bound.codec.messageIndexes), id: bound.id };
  };

  const ruleFor = (topic: string): ResolvedEncodingRule | undefined =>
    rules.find((r) => r.topic === undefined || (typeof r.topic === 'string' ? r.topic === topic : r.topic.test(topic)));

  return {
    async start() {
      if (!needsRegistry) return;
      const pending: Promise<Binding>[] = [];
      for (const rule of rules) {
        const topic = typeof rule.topic === 'string' ? rule.topic : undefined;
        for (const [part, spec] of [['value', rule.value], ['key', rule.key]] as const) {
          if (!spec || spec.schema.kind === 'idHeader') continue;
          const subject = subjectOf(spec, part, topic);
          if (subject !== undefined) pending.push(binding(spec, subject));
        }
      }
      const results = await Promise.allSettled(pending);
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      // A schema refused for good says more than a registry that is down for now.
      const fatal = results.find((r): r is PromiseRejectedResult => r.status === 'rejected' && (r.reason as OutboxError)?.retriable !== true);
      if (fatal) throw fatal.reason;
      if (failed) throw failed.reason;
    },
    async encode({ topic, key, value, headers }) {
      const rule = ruleFor(topic);
      if (!rule || (!rule.value && !rule.key)) return undefined;
      const parts: EncodedParts = { key, value };
      const [encodedValue, encodedKey] = await Promise.all([
        rule.value && value !== null ? encodePart(rule.value, 'value', value, topic, headers) : undefined,
        rule.key ? encodePart(rule.key, 'key', key, topic, headers) : undefined,
      ]);
      if (encodedValue) {
        parts.value = encodedValue.bytes;
        parts.valueSchemaId = encodedValue.id;
      }
      if (encodedKey) {
        parts.key = encodedKey.bytes;
        parts.keySchemaId = encodedKey.id;
      }
      return parts;
    },
    async close() {
      await client?.close();
    },
  };
}
