/**
 * Versioned writes, atomic in Redis (one Lua script each), so an older version never
 * overwrites a newer one whatever order the writers' events come in:
 *
 * - {@link writeEntry} in `'set'` mode (setIfNewer): writes when the key holds no version,
 *   an older one, or a tombstone of the same version; equal or newer values win (a
 *   redelivered event writes nothing).
 * - in `'fill'` mode (getOrLoad's loader result): the same, except that an equal version
 *   rewrites the entry (a rebuild of an unchanged row refreshes it), and an unversioned
 *   fill writes only where no version is held at all.
 * - {@link invalidateEntry} with a version leaves a tombstone: the value goes, the version
 *   stays for tombstoneTtlMs, so a reader that loaded the row before the change (or a late
 *   event) cannot write its older copy back.
 *
 * Versions are compared as decimal strings (length, then digits), so bigints beyond 2^53
 * compare exactly.
 */
import { runScript, script, type CacheRedisClient } from './redisClient.js';

const NEWER = `
local function newer(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
`;

// KEYS[1] data key; ARGV: value, version ('' = none), fresh ttl ms, stale ms, mode.
const WRITE = script(`${NEWER}
local cur = redis.call('HMGET', KEYS[1], 'v', 'ver')
local ver = ARGV[2]
if cur[2] then
  if ver == '' then return 0 end
  if newer(cur[2], ver) then return 0 end
  if cur[2] == ver and cur[1] and ARGV[5] == 'set' then return 0 end
end
redis.call('DEL', KEYS[1])
if ver == '' then
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'ver', ver, 's', ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]))
return 1
`);

// KEYS[1] data key; ARGV: version, tombstone ttl ms.
const INVALIDATE = script(`${NEWER}
local cur = redis.call('HGET', KEYS[1], 'ver')
if cur then
  if newer(cur, ARGV[1]) then return 0 end
  if cur == ARGV[1] and redis.call('HEXISTS', KEYS[1], 'v') == 1 then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'ver', ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
`);

/** What {@link writeEntry} writes. */
export interface WriteEntry {
  value: string;
  /** Decimal, or undefined for an unversioned fill. */
  version: string | undefined;
  freshMs: number;
  staleMs: number;
  mode: 'set' | 'fill';
}

/** Writes an entry if its version allows (see the module comment); true when it wrote. */
export async function writeEntry(client: CacheRedisClient, key: string, w: WriteEntry): Promise<boolean> {
  const reply = await runScript(client, WRITE, [key], [w.value, w.version ?? '', String(w.freshMs), String(w.staleMs), w.mode]);
  return Number(reply) === 1;
}

/**
 * Invalidates `key` at `version` (decimal): replaces an older entry (or none) by a
 * tombstone that keeps the version for `tombstoneMs`; leaves a newer entry, or a value of
 * that same version, alone. True when it invalidated.
 */
export async function invalidateEntry(client: CacheRedisClient, key: string, version: string, tombstoneMs: number): Promise<boolean> {
  return Number(await runScript(client, INVALIDATE, [key], [version, String(tombstoneMs)])) === 1;
}

/** Deletes `key` whatever it holds; true when there was something. */
export async function deleteEntry(client: CacheRedisClient, key: string): Promise<boolean> {
  return Number(await client.sendCommand(['DEL', key])) > 0;
}
