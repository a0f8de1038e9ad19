/**
 * How an entry lies in Redis, and reading it. An entry is a hash at the data key:
 *
 *   v    the encoded value (absent in a tombstone: see invalidate in versionedWrite.ts)
 *   ver  its version, a decimal string (absent for an unversioned fill)
 *   s    its stale window in ms
 *
 * with a PEXPIRE of ttl + stale window. It is fresh while its remaining PTTL is above the
 * stale window, so freshness is measured on the Redis server's clock alone: no client's
 * clock matters, and every process sees an entry turn stale at the same moment.
 */
import { runScript, script, type CacheRedisClient } from './redisClient.js';

/** What a read found at a key. */
export interface Entry {
  /** The encoded value; undefined for a tombstone (an invalidation that remembers its version). */
  value: string | undefined;
  /** The entry's version, decimal; undefined for an unversioned fill. */
  version: string | undefined;
  /** True while the entry is within its ttl; false in its stale window. */
  fresh: boolean;
  /** Milliseconds until Redis drops it (-1: no expiry). */
  pttlMs: number;
  /** Its stale window in ms: it is fresh while `pttlMs` is above this. */
  staleMs: number;
}

// Lua arrays stop at the first nil, so absent fields come back as false (a null reply).
const READ = script(`
local r = redis.call('HMGET', KEYS[1], 'v', 'ver', 's')
return {r[1] or false, r[2] or false, r[3] or false, redis.call('PTTL', KEYS[1])}
`);

/** Reads the entry at `key` in one round trip; undefined when there is none. */
export async function readEntry(client: CacheRedisClient, key: string): Promise<Entry | undefined> {
  const reply = (await runScript(client, READ, [key], [])) as [unknown, unknown, unknown, unknown];
  const pttlMs = Number(reply[3]);
  if (pttlMs === -2) return undefined;
  const value = text(reply[0]);
  const version = text(reply[1]);
  if (value === undefined && version === undefined) return undefined;
  const stale = Number(text(reply[2]) ?? 0);
  return { value, version, pttlMs, staleMs: stale, fresh: pttlMs === -1 || pttlMs > stale };
}

function text(x: unknown): string | undefined {
  if (x === null || x === undefined) return undefined;
  return Buffer.isBuffer(x) ? x.toString('utf8') : String(x);
}
