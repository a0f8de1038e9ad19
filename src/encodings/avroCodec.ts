import type avro from 'avsc';
import { avsc } from './libraries.js';
import type { SchemaCodec } from './codec.js';
import { describeValue, fieldName, joinPath } from './describe.js';
import { decimalLogicalType, fromRowJson, holdsBytes, toRowJson } from './avroValues.js';

type AvroType = avro.Type;

/**
 * An Avro schema's codec (avsc). Rows are plain JSON: a union of null and one other type
 * takes the plain value (avsc's default `wrapUnions: 'auto'` leaves such unions
 * unwrapped), a field missing from the row takes its default, fields the schema does not
 * name are ignored (Avro's own reading rule), bytes are base64 text and decimals numbers
 * or decimal strings (./avroValues.ts). Decoded values come back the same way.
 *
 * @throws Error (avsc's) when the text is not an Avro schema
 */
export function avroCodec(text: string): SchemaCodec {
  const type = avsc().Type.forSchema(JSON.parse(text) as avro.Schema, { logicalTypes: { decimal: decimalLogicalType() } });
  const typeName = type.typeName;
  const bytes = holdsBytes(type);
  return {
    format: 'avro',
    text,
    recordName: typeName === 'record' || typeName === 'error' ? type.name : undefined,
    topIsString: typeName === 'string',
    messageIndexes: undefined,
    encode(row) {
      const value = bytes ? fromRowJson(type, row) : row;
      // avsc would look for the fields in an array or a string, and name a missing field.
      if (typeName === 'record' && (typeof value !== 'object' || value === null || Array.isArray(value))) {
        return { problem: `the value: expected ${describeType(type)}, got ${describeValue(value)}` };
      }
      let problem: string | undefined;
      const valid = type.isValid(value, {
        errorHook(path: string[], got: unknown, expected: AvroType) {
          // The first problem is the one to name; avsc goes on to report the others.
          problem ??= `${fieldName(joinPath(path))}: expected ${describeType(expected)}, got ${describeValue(got)}`;
        },
      });
      if (!valid) return { problem: problem ?? 'the value does not fit the schema' };
      try {
        return { body: type.toBuffer(value) };
      } catch (error) {
        return { problem: (error as Error).message };
      }
    },
    decode(body) {
      const value = plain(type.fromBuffer(body));
      return bytes ? toRowJson(type, value) : value;
    },
  };
}

/** What an Avro type accepts, in words: `double`, `record shop.Order`, `one of null, string`. */
function describeType(type: AvroType): string {
  const t = type as AvroType & { types?: AvroType[]; symbols?: string[]; size?: number; precision?: number; scale?: number };
  switch (type.typeName) {
    case 'bytes':
      return 'bytes (base64 text)';
    case 'logical:decimal':
      return `decimal (precision ${t.precision}, scale ${t.scale}: a number or decimal string)`;
    case 'record':
    case 'error':
      return `record ${type.name}`;
    case 'enum':
      return `enum ${type.name} (one of ${(t.symbols ?? []).join(', ')})`;
    case 'fixed':
      return `fixed ${type.name} of ${t.size} bytes (base64 text)`;
    case 'union:unwrapped':
    case 'union:wrapped':
      // Branches by name, but what a row writes differently (bytes, fixed, decimals) in words.
      return `one of ${(t.types ?? []).map((b) => (/^(bytes|fixed|logical:)/.test(b.typeName) ? describeType(b) : b.branchName ?? b.typeName)).join(', ')}`;
    default:
      return type.typeName.startsWith('logical:') ? type.typeName.slice('logical:'.length) : type.typeName;
  }
}

/** avsc's decoded value (records are class instances) as plain objects and arrays. */
function plain(value: unknown): unknown {
  if (value === null || typeof value !== 'object' || Buffer.isBuffer(value)) return value;
  if (Array.isArray(value)) return value.map(plain);
  const out: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(value)) out[name] = plain(field);
  return out;
}
