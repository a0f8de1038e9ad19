import { createHmac, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

// Console passwords: stored as scrypt hashes (`scrypt$N$r$p$salt$hash`, base64url), made
// by `outbox-relay console-user`; checked in constant time. A plain-text password in the
// users file is accepted too (compared in constant time, at the cost of a hashed one).

const PREFIX = 'scrypt$';
const KEY_LENGTH = 32;
/** 2^15: about 50-100 ms per check on a laptop core; ~32 MiB of memory per check. */
const DEFAULT_COST = { N: 32_768, r: 8, p: 1 };

function scryptAsync(password: string, salt: Buffer, keyLength: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFC'), salt, keyLength, options, (error, key) => (error ? reject(error) : resolve(key)));
  });
}

function memoryFor(c: { N: number; r: number; p: number }): number {
  // scrypt needs 128 * N * r bytes (plus a little); Node's default cap is 32 MiB.
  return 128 * c.N * c.r * (c.p + 1) + 1024 * 1024;
}

/** A stored form of `password`: `scrypt$N$r$p$salt$hash`. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password, salt, KEY_LENGTH, { ...DEFAULT_COST, maxmem: memoryFor(DEFAULT_COST) });
  return `${PREFIX}${DEFAULT_COST.N}$${DEFAULT_COST.r}$${DEFAULT_COST.p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

/** A stored password: a scrypt hash, or a plain text the users file held. */
export type StoredPassword =
  | { kind: 'scrypt'; N: number; r: number; p: number; salt: Buffer; key: Buffer }
  | { kind: 'plain'; text: string };

/** Parse the third field of a users line; a problem text (never quoting it) when malformed. */
export function parseStoredPassword(field: string): StoredPassword | { problem: string } {
  if (!field.startsWith(PREFIX)) {
    if (field.length < 8) return { problem: 'has a plain-text password shorter than 8 characters' };
    return { kind: 'plain', text: field };
  }
  const parts = field.slice(PREFIX.length).split('$');
  const [n, r, p, salt, key] = parts;
  const N = Number(n);
  const R = Number(r);
  const P = Number(p);
  const ok =
    parts.length === 5 &&
    Number.isSafeInteger(N) && N >= 1024 && N <= 1_048_576 && (N & (N - 1)) === 0 &&
    Number.isSafeInteger(R) && R >= 1 && R <= 32 &&
    Number.isSafeInteger(P) && P >= 1 && P <= 16 &&
    /^[A-Za-z0-9_-]{16,128}$/.test(salt ?? '') &&
    /^[A-Za-z0-9_-]{32,128}$/.test(key ?? '');
  if (!ok) return { problem: 'has a malformed scrypt hash (expected scrypt$N$r$p$salt$hash, as `outbox-relay console-user` prints it)' };
  return { kind: 'scrypt', N, r: R, p: P, salt: Buffer.from(salt!, 'base64url'), key: Buffer.from(key!, 'base64url') };
}

// The same work is done for an unknown user as for a known one, so the time a login takes
// does not tell whether the name exists.
const DUMMY: StoredPassword = { kind: 'scrypt', ...DEFAULT_COST, salt: randomBytes(16), key: randomBytes(KEY_LENGTH) };

/** Whether `password` matches `stored` (undefined: an unknown user, checked against a dummy and refused). */
export async function verifyPassword(password: string, stored: StoredPassword | undefined): Promise<boolean> {
  const s = stored ?? DUMMY;
  if (s.kind === 'plain') {
    // Keyed digests of both, compared: constant time whatever the lengths. Then the work of
    // a hashed password, so that a plain-text user answers no faster than another.
    const key = randomBytes(32);
    const same = timingSafeEqual(createHmac('sha256', key).update(password).digest(), createHmac('sha256', key).update(s.text).digest());
    const d = DUMMY as Extract<StoredPassword, { kind: 'scrypt' }>;
    await scryptAsync(password, d.salt, d.key.length, { N: d.N, r: d.r, p: d.p, maxmem: memoryFor(d) });
    return same && stored !== undefined;
  }
  const key = await scryptAsync(password, s.salt, s.key.length, { N: s.N, r: s.r, p: s.p, maxmem: memoryFor(s) });
  return timingSafeEqual(key, s.key) && stored !== undefined;
}
