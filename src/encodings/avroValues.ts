import type avro from 'avsc';
import { avsc } from './libraries.js';

// Where Avro's values and a JSON row's differ, and how a row writes them:
// - `bytes` and `fixed`: base64 text (as Protobuf's JSON mapping writes bytes); decoded
//   back to base64 text.
// - the `decimal` logical type (on bytes or fixed): a JSON number or a decimal string,
//   exact: digits past the scale are refused, not rounded (a float such as 0.1 + 0.2
//   shows as 0.30000000000000004 and is refused at scale 2); decoded to a decimal string.

type AvroType = avro.Type;

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const DECIMAL_TEXT = /^([+-]?)(\d+)(?:\.(\d+))?$/;

/** A row's JSON value as avsc takes it: base64 text at bytes and fixed fields made bytes. */
export function fromRowJson(type: AvroType, value: unknown): unknown {
  return walk(type, value, (v) => (typeof v === 'string' && BASE64.test(v) ? Buffer.from(v, 'base64') : v));
}

/** avsc's decoded value as a row would hold it: bytes and fixed as base64 text. */
export function toRowJson(type: AvroType, value: unknown): unknown {
  return walk(type, value, (v) => (Buffer.isBuffer(v) ? v.toString('base64') : v));
}

/**
 * Whether `type` holds plain bytes or fixed anywhere: when not, rows need no conversion
 * and skip the walk (most schemas; a walk copies every record of every row).
 */
export function holdsBytes(type: AvroType, seen = new Set<AvroType>()): boolean {
  if (seen.has(type)) return false;
  seen.add(type);
  const t = type as AvroType & { fields?: Array<{ type: AvroType }>; itemsType?: AvroType; valuesType?: AvroType; types?: AvroType[] };
  if (type.typeName === 'bytes' || type.typeName === 'fixed') return true;
  const inner = [...(t.fields ?? []).map((f) => f.type), ...(t.itemsType ? [t.itemsType] : []), ...(t.valuesType ? [t.valuesType] : []), ...(t.types ?? [])];
  return inner.some((child) => holdsBytes(child, seen));
}

/** `value` with `convert` applied at every plain bytes or fixed position of `type` (logical types convert themselves). */
function walk(type: AvroType, value: unknown, convert: (value: unknown) => unknown): unknown {
  const t = type as AvroType & { fields?: Array<{ name: string; type: AvroType }>; itemsType?: AvroType; valuesType?: AvroType; types?: AvroType[] };
  switch (type.typeName) {
    case 'bytes':
    case 'fixed':
      return convert(value);
    case 'record':
    case 'error': {
      if (!isObject(value)) return value;
      const out: Record<string, unknown> = { ...value };
      for (const field of t.fields ?? []) if (field.name in out) out[field.name] = walk(field.type, out[field.name], convert);
      return out;
    }
    case 'array':
      return Array.isArray(value) ? value.map((item) => walk(t.itemsType!, item, convert)) : value;
    case 'map': {
      if (!isObject(value)) return value;
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(t.valuesType!, v, convert)]));
    }
    case 'union:unwrapped': {
      // Null and one other type (avsc unwraps only unions whose branches it can tell apart).
      if (value === null || value === undefined) return value;
      const branches = (t.types ?? []).filter((b) => b.typeName !== 'null');
      return branches.length === 1 ? walk(branches[0]!, value, convert) : value;
    }
    case 'union:wrapped': {
      // {"branch name": value}
      if (!isObject(value)) return value;
      const entries = Object.entries(value);
      if (entries.length !== 1) return value;
      const [name, inner] = entries[0]!;
      const branch = (t.types ?? []).find((b) => (b.branchName ?? b.typeName) === name);
      return branch ? { [name]: walk(branch, inner, convert) } : value;
    }
    default:
      return value;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !Buffer.isBuffer(value);
}

/** The decimal logical type for avsc's `logicalTypes` option (made once avsc is loaded). */
export function decimalLogicalType(): new (schema: avro.Schema, opts?: avro.ForSchemaOptions) => avro.types.LogicalType {
  return (decimalType ??= makeDecimalType());
}

let decimalType: (new (schema: avro.Schema, opts?: avro.ForSchemaOptions) => avro.types.LogicalType) | undefined;

function makeDecimalType(): new (schema: avro.Schema, opts?: avro.ForSchemaOptions) => avro.types.LogicalType {
  const { LogicalType } = avsc().types;
  return class DecimalType extends LogicalType {
    readonly precision: number;
    readonly scale: number;
    constructor(schema: avro.Schema, opts?: avro.ForSchemaOptions) {
      super(schema as never, opts);
      const s = schema as { precision?: unknown; scale?: unknown };
      this.precision = Number(s.precision);
      this.scale = s.scale === undefined ? 0 : Number(s.scale);
      if (!Number.isSafeInteger(this.precision) || this.precision < 1) throw new Error(`decimal: precision ${JSON.stringify(s.precision)} is not a whole number of at least 1`);
      if (!Number.isSafeInteger(this.scale) || this.scale < 0 || this.scale > this.precision) throw new Error(`decimal: scale ${JSON.stringify(s.scale)} is not a whole number from 0 to the precision`);
    }

    /** Decimal text, with exactly `scale` digits after the point. */
    protected override _fromValue(bytes: Buffer): string {
      const unscaled = fromTwosComplement(bytes);
      const negative = unscaled < 0n;
      const digits = (negative ? -unscaled : unscaled).toString().padStart(this.scale + 1, '0');
      const whole = digits.slice(0, digits.length - this.scale);
      const fraction = this.scale > 0 ? `.${digits.slice(digits.length - this.scale)}` : '';
      return `${negative ? '-' : ''}${whole}${fraction}`;
    }

    /** The unscaled value's bytes; undefined (not valid) when it has more digits than the schema allows. */
    protected override _toValue(value: unknown): Buffer | undefined {
      const text = typeof value === 'number' && Number.isFinite(value) ? String(value) : typeof value === 'string' ? value : undefined;
      const match = text === undefined ? null : DECIMAL_TEXT.exec(text);
      if (!match) return undefined;
      const [, sign, whole, fraction = ''] = match;
      // Digits past the scale must be zeros: 12.50 at scale 1 is 12.5, 12.55 is not.
      if (fraction.length > this.scale && /[^0]/.test(fraction.slice(this.scale))) return undefined;
      const digits = `${whole}${fraction.slice(0, this.scale).padEnd(this.scale, '0')}`.replace(/^0+(?=\d)/, '');
      if (digits.replace(/^0+/, '').length > this.precision) return undefined;
      const unscaled = BigInt(digits) * (sign === '-' ? -1n : 1n);
      const size = (this.underlyingType as AvroType & { size?: number }).size;
      return toTwosComplement(unscaled, size);
    }
  } as unknown as new (schema: avro.Schema, opts?: avro.ForSchemaOptions) => avro.types.LogicalType;
}

/** Big-endian two's complement in the fewest bytes, or in exactly `size` (undefined when it does not fit). */
function toTwosComplement(value: bigint, size: number | undefined): Buffer | undefined {
  let length = 1;
  while (value < -(1n << BigInt(8 * length - 1)) || value >= 1n << BigInt(8 * length - 1)) length++;
  if (size !== undefined) {
    if (length > size) return undefined;
    length = size;
  }
  let v = value < 0n ? (1n << BigInt(8 * length)) + value : value;
  const out = Buffer.alloc(length);
  for (let i = length - 1; i >= 0; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}

function fromTwosComplement(bytes: Buffer): bigint {
  if (bytes.length === 0) return 0n;
  let v = 0n;
  for (const b of bytes) v = (v << 8n) | BigInt(b);
  return bytes[0]! & 0x80 ? v - (1n << BigInt(8 * bytes.length)) : v;
}
