import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { ConfigError } from '../shared/errors.js';
import { topicNameProblem } from '../shared/kafkaNames.js';
import type { RegistryFormat, SchemaCodec } from './codec.js';
import { schemaCodec } from './schemaCodec.js';
import { resolveSchemaRegistryOptions, type ResolvedSchemaRegistryOptions, type SchemaRegistryOptions } from './registryOptions.js';

export { resolveSchemaRegistryOptions, type ResolvedSchemaRegistryOptions, type SchemaRegistryOptions } from './registryOptions.js';

/** How a value or key goes out: JSON as the row has it, or through the schema registry. */
export type EncodingFormat = 'json' | 'avro' | 'protobuf' | 'json-schema';

/**
 * How the registry subject of a schema is named (Confluent's strategies): `TopicName`
 * `<topic>-value` / `<topic>-key`; `RecordName` the record's full name (Avro
 * `namespace.name`, Protobuf `package.Message`, JSON Schema `title`); `TopicRecordName`
 * `<topic>-<record name>`.
 */
export type SubjectStrategy = 'TopicName' | 'RecordName' | 'TopicRecordName';

/** Where a rule's schema comes from. */
export type SchemaSource =
  /**
   * A schema file of the app's repository. Registered under its subject at start when
   * `autoRegister` (default true); otherwise it must already be registered there (looked
   * up by content).
   */
  | { file: string; autoRegister?: boolean }
  /**
   * A version registered in the registry (`latest` is read once, at first use). `subject`
   * defaults to the strategy's; RecordName and TopicRecordName need it.
   */
  | { version: number | 'latest'; subject?: string }
  /** Each row names its schema id in this header (a decimal string); fetched by id, cached. */
  | { idHeader: string };

/** How a value (or key) is encoded: its format, where its schema comes from, and its subject's name. */
export interface EncodingSpec {
  format: EncodingFormat;
  /** Required unless `format` is json. */
  schema?: SchemaSource;
  /** Default TopicName. */
  subjectStrategy?: SubjectStrategy;
  /** Protobuf: the message to encode (`Order`, `shop.Order`, `Outer.Inner`); default the file's first. */
  messageName?: string;
}

/** Which rows a rule encodes (by outbox and topic) and how: their value, and optionally their key. */
export interface EncodingRule {
  /** Only rows of this outbox (default: every outbox). */
  outbox?: string;
  /** A topic's exact name, or a regular expression written `/.../` that must match the whole name (default: every topic). */
  topic?: string;
  value?: EncodingSpec;
  key?: EncodingSpec;
}

/**
 * The relay's `encodings` option (or the JSON of `--encodings-file`): the registry and the
 * rules by topic. Rows still hold JSON; the relay encodes them (docs/encodings.md).
 */
export interface EncodingOptions {
  schemaRegistry?: SchemaRegistryOptions;
  /** The first rule that matches a row's outbox and topic decides; a row no rule matches goes out as JSON. */
  rules: EncodingRule[];
}

/** A schema source with its file read and parsed. */
export type ResolvedSchemaSource =
  | { kind: 'file'; file: string; codec: SchemaCodec; autoRegister: boolean }
  | { kind: 'version'; version: number | 'latest'; subject: string | undefined }
  | { kind: 'idHeader'; idHeader: string };

export interface ResolvedEncodingSpec {
  format: RegistryFormat;
  schema: ResolvedSchemaSource;
  subjectStrategy: SubjectStrategy;
  messageName: string | undefined;
  /** The option's path, for messages (`encodings.rules[1].value`). */
  setting: string;
}

export interface ResolvedEncodingRule {
  outbox: string | undefined;
  /** Exact name, a whole-name pattern, or undefined for every topic. */
  topic: string | RegExp | undefined;
  /** undefined: the value goes out as the row has it (no encoding, or `json`). */
  value: ResolvedEncodingSpec | undefined;
  key: ResolvedEncodingSpec | undefined;
}

const RESOLVED: unique symbol = Symbol('outbox-relay.resolvedEncodings');

export interface ResolvedEncodingOptions {
  /** Marks options already resolved: resolving them again returns them as they are. */
  readonly [RESOLVED]: true;
  schemaRegistry: ResolvedSchemaRegistryOptions | undefined;
  rules: ResolvedEncodingRule[];
}

const FORMATS: readonly EncodingFormat[] = ['json', 'avro', 'protobuf', 'json-schema'];
const STRATEGIES: readonly SubjectStrategy[] = ['TopicName', 'RecordName', 'TopicRecordName'];
const OPTION_KEYS = new Set(['schemaRegistry', 'rules']);
const RULE_KEYS = new Set(['outbox', 'topic', 'value', 'key']);
const SPEC_KEYS = new Set(['format', 'schema', 'subjectStrategy', 'messageName']);
const MAX_RULES = 1_000;
const FORMAT_NAMES: Record<RegistryFormat, string> = { avro: 'an Avro', protobuf: 'a Protobuf', 'json-schema': 'a JSON Schema' };

/** Env variables of the registry's secrets for an encodings file (or `${name}_FILE` naming a file). */
export const REGISTRY_PASSWORD_ENV = 'OUTBOX_SCHEMA_REGISTRY_PASSWORD';
export const REGISTRY_TOKEN_ENV = 'OUTBOX_SCHEMA_REGISTRY_TOKEN';

/**
 * Validate encodings once, at the boundary: schema files read and parsed for their
 * format (Avro by avsc, Protobuf by protobufjs, JSON Schema by ajv), topic patterns
 * compiled, defaults filled. Options already resolved come back as they are.
 *
 * @param baseDir the folder relative schema files are read from
 * @throws ConfigError whose setting names the path of the bad option, e.g.
 *   `encodings.rules[1].value.schema.file`
 */
export function resolveEncodingOptions(input: unknown, baseDir: string, setting = 'encodings'): ResolvedEncodingOptions {
  if (isResolved(input)) return input;
  const options = object(input, setting);
  unknownKeys(options, OPTION_KEYS, setting);
  if (!Array.isArray(options.rules)) throw new ConfigError(`${setting}.rules`, 'is required: a list of rules');
  if (options.rules.length > MAX_RULES) throw new ConfigError(`${setting}.rules`, `has ${options.rules.length} rules, at most ${MAX_RULES}`);
  const rules = options.rules.map((rule, i) => resolveRule(rule, `${setting}.rules[${i}]`, baseDir));
  const schemaRegistry = options.schemaRegistry === undefined ? undefined : resolveSchemaRegistryOptions(options.schemaRegistry, `${setting}.schemaRegistry`);
  if (!schemaRegistry) {
    const encoded = rules.findIndex((r) => r.value || r.key);
    if (encoded >= 0) {
      const part = rules[encoded]!.value ? 'value' : 'key';
      throw new ConfigError(`${setting}.schemaRegistry`, `is required: ${setting}.rules[${encoded}].${part} encodes ${rules[encoded]![part]!.format} through the schema registry`);
    }
  }
  return { [RESOLVED]: true, schemaRegistry, rules };
}

/**
 * The encodings of a JSON file (the CLI's `--encodings-file`):
 * `{ "schemaRegistry": { "url": ... }, "rules": [...] }`, relative schema files read from
 * the file's folder. Secrets never come from the file (it tends to live in a repository):
 * the registry's password comes from OUTBOX_SCHEMA_REGISTRY_PASSWORD and a bearer token
 * from OUTBOX_SCHEMA_REGISTRY_TOKEN (or the file the `_FILE` variant names).
 *
 * @throws ConfigError for an unreadable file, bad JSON, a secret in the file, a bad rule
 */
export function loadEncodingsFile(path: string, env: NodeJS.ProcessEnv = process.env): ResolvedEncodingOptions {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError('encodingsFile', `cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    // The parser's message may quote the file's text: only its position is kept.
    const position = /position \d+|line \d+ column \d+/.exec((error as Error).message)?.[0];
    throw new ConfigError('encodingsFile', `${path} is not JSON${position ? ` (${position})` : ''}`);
  }
  const options = object(parsed, 'encodings');
  const registry = options.schemaRegistry;
  if (registry !== undefined) {
    const fields = object(registry, 'encodings.schemaRegistry');
    for (const secret of ['password', 'bearerToken'] as const) {
      if (fields[secret] !== undefined) {
        const variable = secret === 'password' ? REGISTRY_PASSWORD_ENV : REGISTRY_TOKEN_ENV;
        throw new ConfigError(`encodings.schemaRegistry.${secret}`, `is a secret and is not read from ${path}: set ${variable} or ${variable}_FILE`);
      }
    }
    const password = secretFromEnv(env, REGISTRY_PASSWORD_ENV);
    const bearerToken = secretFromEnv(env, REGISTRY_TOKEN_ENV);
    options.schemaRegistry = {
      ...fields,
      ...(password !== undefined ? { password } : {}),
      ...(bearerToken !== undefined ? { bearerToken } : {}),
    };
  }
  return resolveEncodingOptions(options, dirname(resolve(path)));
}

function secretFromEnv(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const direct = env[name];
  const file = env[`${name}_FILE`];
  if (direct && file) throw new ConfigError(name, `and ${name}_FILE are both set; set one`);
  if (direct) return direct;
  if (!file) return undefined;
  try {
    return readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (error) {
    throw new ConfigError(`${name}_FILE`, `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
}

function isResolved(input: unknown): input is ResolvedEncodingOptions {
  return typeof input === 'object' && input !== null && (input as Partial<ResolvedEncodingOptions>)[RESOLVED] === true;
}

function resolveRule(input: unknown, setting: string, baseDir: string): ResolvedEncodingRule {
  const rule = object(input, setting);
  unknownKeys(rule, RULE_KEYS, setting);
  let outbox: string | undefined;
  if (rule.outbox !== undefined) {
    if (typeof rule.outbox !== 'string' || rule.outbox === '') throw new ConfigError(`${setting}.outbox`, 'is not an outbox name');
    outbox = rule.outbox;
  }
  const topic = resolveTopic(rule.topic, `${setting}.topic`);
  if (rule.value === undefined && rule.key === undefined) {
    throw new ConfigError(setting, 'names neither a value nor a key encoding');
  }
  const value = rule.value === undefined ? undefined : resolveSpec(rule.value, `${setting}.value`, baseDir);
  const key = rule.key === undefined ? undefined : resolveSpec(rule.key, `${setting}.key`, baseDir);
  return { outbox, topic, value, key };
}

function resolveTopic(topic: unknown, setting: string): string | RegExp | undefined {
  if (topic === undefined) return undefined;
  if (typeof topic !== 'string') throw new ConfigError(setting, 'is not text: a topic name or a /regular expression/');
  const pattern = /^\/(.+)\/([a-z]*)$/s.exec(topic);
  if (pattern) {
    const flags = pattern[2]!;
    if (/[gy]/.test(flags)) throw new ConfigError(setting, `flags g and y do not apply to a topic pattern (${JSON.stringify(topic)})`);
    try {
      // The whole topic name must match, as in Kafka's own topic patterns.
      return new RegExp(`^(?:${pattern[1]})$`, flags);
    } catch (error) {
      throw new ConfigError(setting, `is not a valid regular expression: ${(error as Error).message}`);
    }
  }
  const problem = topicNameProblem(topic);
  if (problem) throw new ConfigError(setting, problem);
  return topic;
}

/** undefined for json (the row's value as it is). */
function resolveSpec(input: unknown, setting: string, baseDir: string): ResolvedEncodingSpec | undefined {
  const spec = object(input, setting);
  unknownKeys(spec, SPEC_KEYS, setting);
  if (!FORMATS.includes(spec.format as EncodingFormat)) {
    throw new ConfigError(`${setting}.format`, `${JSON.stringify(spec.format)} is not one of ${FORMATS.join(', ')}`);
  }
  const format = spec.format as EncodingFormat;
  if (format === 'json') {
    for (const extra of ['schema', 'subjectStrategy', 'messageName'] as const) {
      if (spec[extra] !== undefined) throw new ConfigError(`${setting}.${extra}`, 'does not apply to format json');
    }
    return undefined;
  }
  const subjectStrategy = spec.subjectStrategy ?? 'TopicName';
  if (!STRATEGIES.includes(subjectStrategy as SubjectStrategy)) {
    throw new ConfigError(`${setting}.subjectStrategy`, `${JSON.stringify(subjectStrategy)} is not one of ${STRATEGIES.join(', ')}`);
  }
  let messageName: string | undefined;
  if (spec.messageName !== undefined) {
    if (format !== 'protobuf') throw new ConfigError(`${setting}.messageName`, `applies to format protobuf only, not ${format}`);
    if (typeof spec.messageName !== 'string' || spec.messageName.trim() === '') throw new ConfigError(`${setting}.messageName`, 'is not a message name');
    messageName = spec.messageName.trim();
  }
  if (spec.schema === undefined) throw new ConfigError(`${setting}.schema`, `is required for format ${format}: { file }, { version } or { idHeader }`);
  const schema = resolveSource(spec.schema, `${setting}.schema`, baseDir, format, messageName);
  const strategy = subjectStrategy as SubjectStrategy;
  if (strategy !== 'TopicName') {
    if (schema.kind === 'version' && schema.subject === undefined) {
      throw new ConfigError(`${setting}.schema.subject`, `is required: a version source cannot name its ${strategy} subject before it has the schema`);
    }
    if (schema.kind === 'file' && schema.codec.recordName === undefined) {
      throw new ConfigError(`${setting}.subjectStrategy`, `${strategy} needs a record name, and ${schema.file} has none (${recordNameHint(format)})`);
    }
  }
  return { format, schema, subjectStrategy: strategy, messageName, setting };
}

function recordNameHint(format: RegistryFormat): string {
  if (format === 'avro') return 'its top type is not a record';
  if (format === 'json-schema') return 'it has no "title"';
  return 'no message';
}

function resolveSource(input: unknown, setting: string, baseDir: string, format: RegistryFormat, messageName: string | undefined): ResolvedSchemaSource {
  const source = object(input, setting);
  const kinds = (['file', 'version', 'idHeader'] as const).filter((k) => source[k] !== undefined);
  if (kinds.length !== 1) {
    throw new ConfigError(setting, kinds.length === 0 ? 'names no schema: { file }, { version } or { idHeader }' : `names both ${kinds.join(' and ')}: one of them`);
  }
  const kind = kinds[0]!;
  const allowed: Record<typeof kind, Set<string>> = {
    file: new Set(['file', 'autoRegister']),
    version: new Set(['version', 'subject']),
    idHeader: new Set(['idHeader']),
  };
  unknownKeys(source, allowed[kind], setting);
  if (kind === 'file') {
    if (typeof source.file !== 'string' || source.file === '') throw new ConfigError(`${setting}.file`, 'is not a file name');
    if (source.autoRegister !== undefined && typeof source.autoRegister !== 'boolean') throw new ConfigError(`${setting}.autoRegister`, 'is not true or false');
    const file = resolve(baseDir, source.file);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new ConfigError(`${setting}.file`, `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
    }
    let codec: SchemaCodec;
    try {
      codec = schemaCodec(format, text, messageName);
    } catch (error) {
      throw new ConfigError(`${setting}.file`, `${file} is not ${FORMAT_NAMES[format]} schema: ${(error as Error).message}`);
    }
    return { kind, file, codec, autoRegister: source.autoRegister ?? true };
  }
  if (kind === 'version') {
    const version = source.version;
    if (version !== 'latest' && !(Number.isSafeInteger(version) && (version as number) >= 1)) {
      throw new ConfigError(`${setting}.version`, `${JSON.stringify(version)} is not a version number (1 or more) or "latest"`);
    }
    let subject: string | undefined;
    if (source.subject !== undefined) {
      if (typeof source.subject !== 'string' || source.subject.trim() === '') throw new ConfigError(`${setting}.subject`, 'is not a subject name');
      subject = source.subject;
    }
    return { kind, version: version as number | 'latest', subject };
  }
  if (typeof source.idHeader !== 'string' || source.idHeader.trim() === '') throw new ConfigError(`${setting}.idHeader`, 'is not a header name');
  return { kind, idHeader: source.idHeader };
}

function object(value: unknown, setting: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ConfigError(setting, `is not an object (${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value})`);
  }
  return { ...(value as Record<string, unknown>) };
}

function unknownKeys(value: Record<string, unknown>, known: ReadonlySet<string>, setting: string): void {
  for (const key of Object.keys(value)) {
    if (!known.has(key)) throw new ConfigError(`${setting}.${key}`, `is not an option here (known: ${[...known].join(', ')})`);
  }
}
