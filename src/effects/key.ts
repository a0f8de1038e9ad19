/**
 * Effect keys: what the guard remembers an effect by, and the form it hands downstream.
 *
 * A key must be the same on every attempt at the same effect, and differ between effects:
 * the design's pattern is event type + entity + version (`notif:<userId>:<template>:<eventVersion>`),
 * or an upstream request id. {@link effectKey} builds one from its parts, escaping the
 * separator so that no two part lists give the same key, and refuses the parts it can
 * tell are unstable or missing (undefined, NaN, an empty string, a Date). It cannot tell
 * a random or time-derived string from a stable one: that stays the caller's care.
 */
import { createHash } from 'node:crypto';
import { EffectKeyError } from './errors.js';

/** Longest key the guard accepts (the Postgres store keeps it in a btree index). */
export const MAX_KEY_LENGTH = 512;
/** Longest part of a key built by {@link effectKey}. */
const MAX_PART_LENGTH = 200;
/** Longest key passed downstream as it is (Stripe's limit on Idempotency-Key is 255). */
const MAX_HEADER_KEY_LENGTH = 255;

/** One part of an effect key: a non-empty string, a safe integer or a bigint. */
export type EffectKeyPart = string | number | bigint;

/** The parts of an effect key: what kind of effect, for which entity, at which version. */
export interface EffectKeyParts {
  /** The kind of effect, e.g. `'notif'` or `'charge'`. */
  type: string;
  /** The entity, or several parts of it (`[userId, template]`). */
  entity: EffectKeyPart | readonly EffectKeyPart[];
  /** The event's version of the entity (a row version, an event sequence, an outbox id). */
  version: EffectKeyPart;
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function part(name: string, value: unknown): string {
  if (typeof value === 'string') {
    if (value.trim() === '') throw new EffectKeyError(name, `is ${value === '' ? 'empty' : 'blank'}: it would not tell effects apart`);
    if (value.length > MAX_PART_LENGTH) throw new EffectKeyError(name, `is longer than ${MAX_PART_LENGTH} characters`);
    // encodeURIComponent leaves no ':' (the separator) and no '%' of its own: parts never run into each other.
    return encodeURIComponent(value);
  }
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) throw new EffectKeyError(name, `is ${String(value)}: a number part must be a safe integer (NaN, infinities and fractions do not make stable keys)`);
    return String(value);
  }
  const what = value instanceof Date ? 'a Date (a time is not a stable key: use the event\'s version or id)' : describe(value);
  throw new EffectKeyError(name, `is ${what}: a part must be a non-empty string, a safe integer or a bigint`);
}

/** Throws EffectKeyError unless `key` is a key the guard accepts; returns it. */
export function checkKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) throw new EffectKeyError('key', 'must be a non-empty string');
  if (key.length > MAX_KEY_LENGTH) throw new EffectKeyError('key', `is longer than ${MAX_KEY_LENGTH} characters`);
  if (key.includes('\u0000')) throw new EffectKeyError('key', 'contains NUL, which Postgres text cannot hold');
  return key;
}

/**
 * An effect key from its parts: `<type>:<entity parts...>:<version>`, each part
 * percent-encoded (so a `:` inside a part cannot be taken for a separator, and the key
 * is plain ASCII). `effectKey({ type: 'notif', entity: [userId, template], version })`
 * gives `notif:<userId>:<template>:<version>`.
 * @throws EffectKeyError naming a part that is undefined, null, NaN, not an integer, empty, blank, an object (a Date), or too long
 */
function buildEffectKey(parts: EffectKeyParts): string {
  if (typeof parts !== 'object' || parts === null) throw new EffectKeyError('parts', 'must be an object { type, entity, version }');
  const entity = Array.isArray(parts.entity) ? (parts.entity as readonly unknown[]) : [parts.entity];
  if (entity.length === 0) throw new EffectKeyError('entity', 'is an empty list');
  const key = [part('type', parts.type), ...entity.map((e, i) => part(entity.length === 1 ? 'entity' : `entity[${i}]`, e)), part('version', parts.version)].join(':');
  return checkKey(key);
}

/**
 * An effect key from an upstream request id (an id the caller sent with its request and
 * sends again when it retries): `req:<id>`, or `<type>:req:<id>` with a `type`. Give a
 * type when one request causes several effects, or they would share one key and all but
 * the first be skipped.
 * @throws EffectKeyError when the id or the type is empty, blank, not a string, or too long
 */
function fromRequest(requestId: string, type?: string): string {
  if (typeof requestId !== 'string') throw new EffectKeyError('requestId', `is ${describe(requestId)}: it must be a string`);
  const id = part('requestId', requestId);
  return checkKey(type === undefined ? `req:${id}` : `${part('type', type)}:req:${id}`);
}

/**
 * Builds effect keys, validating their parts: `effectKey({ type, entity, version })`
 * (event type + entity + version) and `effectKey.fromRequest(requestId, type?)` (an
 * upstream request id).
 */
export const effectKey: ((parts: EffectKeyParts) => string) & { fromRequest: (requestId: string, type?: string) => string } = Object.assign(buildEffectKey, { fromRequest });

/**
 * The form of `key` handed to the effect for downstream services (an `Idempotency-Key`
 * header): the key itself when it is 1-255 visible ASCII characters (every key
 * {@link effectKey} builds, up to that length), else `sha256:` and the base64url SHA-256
 * of the key, which is as stable and fits any header.
 */
export function downstreamKey(key: string): string {
  if (key.length <= MAX_HEADER_KEY_LENGTH && /^[\x21-\x7e]+$/.test(key)) return key;
  return `sha256:${createHash('sha256').update(key, 'utf8').digest('base64url')}`;
}
