import type protobuf from 'protobufjs';
import { protobufjs } from './libraries.js';
import type { SchemaCodec } from './codec.js';
import { describeValue, fieldName, joinPath, quote } from './describe.js';

/**
 * A Protobuf schema's codec (protobufjs), for one message of a .proto file.
 *
 * Rows are JSON in the shape of Protobuf's JSON mapping: fields by their .proto name or
 * their lowerCamelCase JSON name, 64-bit integers as numbers or decimal strings, enums by
 * name (or number), bytes as base64, null for "not set". A field the message does not
 * have is refused (a typo would otherwise vanish). protobufjs' own `fromObject` coerces
 * anything (`"abc"` becomes 0 in an int32), so the row is checked here first, field by
 * field. Decoded values use the .proto names, longs as numbers, enums as names, bytes as
 * base64, and every field present (defaults filled).
 *
 * Only the well-known google/protobuf/*.proto imports are understood; schema references
 * to other subjects are not.
 *
 * @throws Error when the text does not parse, imports another file, declares no message,
 *   or has no message `messageName`
 */
export function protobufCodec(text: string, messageName?: string): SchemaCodec {
  const parsed = protobufjs().parse(text, { keepCase: true });
  const root = parsed.root;
  for (const file of [...(parsed.imports ?? []), ...(parsed.weakImports ?? [])]) {
    const common = protobufjs().common.get(file) as { nested?: Record<string, protobuf.AnyNestedObject> } | null;
    if (!common?.nested) throw new Error(`it imports ${file}: schema references are not supported, only google/protobuf well-known types`);
    root.addJSON(common.nested);
  }
  root.resolveAll();
  const file = parsed.package ? root.lookup(parsed.package) : root;
  if (!(file instanceof protobufjs().Namespace)) throw new Error(`package ${parsed.package} is not a namespace`);
  const topMessages = messagesOf(file);
  if (topMessages.length === 0) throw new Error('it declares no message');
  const type = messageName === undefined ? topMessages[0]! : findMessage(root, file, parsed.package, messageName);
  const messageIndexes = indexesOf(type, file);
  return {
    format: 'protobuf',
    text,
    recordName: type.fullName.replace(/^\./, ''),
    topIsString: false,
    messageIndexes,
    encode(value) {
      const checked = checkMessage(type, value, []);
      if ('problem' in checked) return checked;
      try {
        const message = type.fromObject(checked.value as Record<string, unknown>);
        const bytes = type.encode(message).finish();
        return { body: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) };
      } catch (error) {
        return { problem: (error as Error).message };
      }
    },
    decode(body, indexes = messageIndexes) {
      const target = messageAt(file, indexes);
      return target.toObject(target.decode(body), {
        longs: Number,
        enums: String,
        bytes: String,
        defaults: true,
        arrays: true,
        objects: true,
      });
    },
  };
}

/** The message types declared directly in a namespace or message, in declaration order. */
function messagesOf(parent: protobuf.NamespaceBase): protobuf.Type[] {
  return parent.nestedArray.filter((n): n is protobuf.Type => n instanceof protobufjs().Type);
}

function findMessage(root: protobuf.Root, file: protobuf.NamespaceBase, pkg: string | undefined, name: string): protobuf.Type {
  const bare = name.replace(/^\./, '');
  const candidates = pkg && !bare.startsWith(`${pkg}.`) ? [`${pkg}.${bare}`, bare] : [bare];
  for (const candidate of candidates) {
    const found = root.lookup(candidate);
    if (found instanceof protobufjs().Type && isWithin(found, file)) return found;
  }
  throw new Error(`it has no message ${name}`);
}

function isWithin(type: protobuf.ReflectionObject, file: protobuf.NamespaceBase): boolean {
  for (let at = type.parent; at; at = at.parent) if (at === file) return true;
  return false;
}

/**
 * Confluent's message indexes of a message: its position among its file's top-level
 * messages, then among its parent's nested messages. protoc counts a map field's
 * generated entry message among the nested ones where the field is declared, and
 * protobufjs keeps no such entry, so a nested message below a message with map fields
 * has no index this can know: refused rather than guessed.
 */
function indexesOf(type: protobuf.Type, file: protobuf.NamespaceBase): number[] {
  const path: number[] = [];
  for (let at: protobuf.Type = type; ; ) {
    const parent = at.parent;
    if (!parent) throw new Error(`message ${at.fullName} is outside its file`);
    if (parent !== file && parent instanceof protobufjs().Type && parent.fieldsArray.some((f) => f.map)) {
      throw new Error(`message ${type.fullName} is nested in ${parent.fullName}, which has map fields: its Confluent message index is ambiguous; move it to the top level`);
    }
    path.unshift(messagesOf(parent).indexOf(at));
    if (parent === file) return path;
    if (!(parent instanceof protobufjs().Type)) throw new Error(`message ${type.fullName} is outside its file`);
    at = parent;
  }
}

/** The message a message-index path names in a file. */
function messageAt(file: protobuf.NamespaceBase, indexes: readonly number[]): protobuf.Type {
  let parent: protobuf.NamespaceBase = file;
  let type: protobuf.Type | undefined;
  for (const index of indexes) {
    type = messagesOf(parent)[index];
    if (!type) throw new Error(`the schema has no message at message indexes [${indexes.join(', ')}]`);
    parent = type;
  }
  if (!type) throw new Error('empty message indexes');
  return type;
}

type Checked = { value: unknown } | { problem: string };

const fieldsByName = new WeakMap<protobuf.Type, Map<string, protobuf.Field>>();

/** A message's fields by .proto name and by JSON name. */
function fieldMap(type: protobuf.Type): Map<string, protobuf.Field> {
  let map = fieldsByName.get(type);
  if (!map) {
    map = new Map();
    for (const field of type.fieldsArray) {
      map.set(field.name, field);
      map.set(protobufjs().util.camelCase(field.name), field);
    }
    fieldsByName.set(type, map);
  }
  return map;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A JSON value checked against a message, its keys renamed to the .proto field names. */
function checkMessage(type: protobuf.Type, value: unknown, path: string[]): Checked {
  if (!isPlainObject(value)) return mismatch(path, `message ${type.fullName.replace(/^\./, '')}`, value);
  const fields = fieldMap(type);
  const out: Record<string, unknown> = {};
  const oneofs = new Map<string, string>();
  for (const [key, item] of Object.entries(value)) {
    const field = fields.get(key);
    if (!field) return { problem: `${fieldName(joinPath([...path, key]))}: message ${type.name} has no such field` };
    if (item === null || item === undefined) continue;
    const at = [...path, field.name];
    if (field.partOf) {
      const other = oneofs.get(field.partOf.name);
      if (other !== undefined) {
        return { problem: `${fieldName(joinPath(at))}: ${other} is set too, and only one of oneof ${field.partOf.name} may be` };
      }
      oneofs.set(field.partOf.name, field.name);
    }
    const checked = checkField(field, item, at);
    if ('problem' in checked) return checked;
    out[field.name] = checked.value;
  }
  for (const field of type.fieldsArray) {
    if (field.required && out[field.name] === undefined) {
      return { problem: `${fieldName(joinPath([...path, field.name]))}: required, got ${describeValue(undefined)}` };
    }
  }
  return { value: out };
}

function checkField(field: protobuf.Field, value: unknown, path: string[]): Checked {
  if (field.map) {
    const keyType = (field as unknown as protobuf.MapField).keyType;
    if (!isPlainObject(value)) return mismatch(path, `map<${keyType}, ${field.type}>`, value);
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      if (scalarProblem(keyType, key, true)) return { problem: `${fieldName(joinPath(path))}: key ${quote(key)} is not a ${keyType}` };
      const checked = checkSingle(field, item, [...path, key]);
      if ('problem' in checked) return checked;
      out[key] = checked.value;
    }
    return { value: out };
  }
  if (field.repeated) {
    if (!Array.isArray(value)) return mismatch(path, `a list of ${field.type}`, value);
    const out: unknown[] = [];
    for (let i = 0; i < value.length; i++) {
      const checked = checkSingle(field, value[i], [...path, String(i)]);
      if ('problem' in checked) return checked;
      out.push(checked.value);
    }
    return { value: out };
  }
  return checkSingle(field, value, path);
}

function checkSingle(field: protobuf.Field, value: unknown, path: string[]): Checked {
  const resolved = field.resolvedType;
  if (resolved instanceof protobufjs().Type) return checkMessage(resolved, value, path);
  if (resolved instanceof protobufjs().Enum) {
    if (typeof value === 'string' && Object.hasOwn(resolved.values, value)) return { value };
    if (typeof value === 'number' && Number.isInteger(value) && value >= -0x8000_0000 && value <= 0x7fff_ffff) return { value };
    const names = Object.keys(resolved.values);
    return mismatch(path, `enum ${resolved.name} (one of ${names.slice(0, 10).join(', ')}${names.length > 10 ? ', …' : ''})`, value);
  }
  const problem = scalarProblem(field.type, value, false);
  return problem ? mismatch(path, problem, value) : { value };
}

const INT_TEXT = /^-?\d+$/;
const NUMBER_TEXT = /^-?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;
const BASE64 = /^[A-Za-z0-9+/\-_]*={0,2}$/;
const RANGES: Record<string, [bigint, bigint]> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  sint32: [-(2n ** 31n), 2n ** 31n - 1n],
  sfixed32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  fixed32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  sint64: [-(2n ** 63n), 2n ** 63n - 1n],
  sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  fixed64: [0n, 2n ** 64n - 1n],
};

/**
 * What a scalar field expects when `value` does not fit it, else undefined. `asKey`:
 * the value is a map key, always text in JSON.
 */
function scalarProblem(type: string, value: unknown, asKey: boolean): string | undefined {
  const range = RANGES[type];
  if (range) {
    const accepts = `${type} (a whole number from ${range[0]} to ${range[1]})`;
    let whole: bigint;
    if (typeof value === 'number' && !asKey) {
      if (!Number.isSafeInteger(value)) return accepts;
      whole = BigInt(value);
    } else if (typeof value === 'string' && INT_TEXT.test(value)) {
      whole = BigInt(value);
    } else {
      return accepts;
    }
    return whole < range[0] || whole > range[1] ? accepts : undefined;
  }
  switch (type) {
    case 'double':
    case 'float':
      if (typeof value === 'number') return undefined;
      if (typeof value === 'string' && (NUMBER_TEXT.test(value) || ['NaN', 'Infinity', '-Infinity'].includes(value))) return undefined;
      return type;
    case 'bool':
      if (asKey) return value === 'true' || value === 'false' ? undefined : type;
      return typeof value === 'boolean' ? undefined : type;
    case 'string':
      return typeof value === 'string' ? undefined : type;
    case 'bytes':
      return typeof value === 'string' && BASE64.test(value) ? undefined : 'bytes (base64 text)';
    default:
      return type;
  }
}

function mismatch(path: string[], expected: string, got: unknown): { problem: string } {
  return { problem: `${fieldName(joinPath(path))}: expected ${expected}, got ${describeValue(got)}` };
}
