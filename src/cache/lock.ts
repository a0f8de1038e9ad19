/**
 * The short rebuild lock that makes a rebuild single-flight across processes: `SET key
 * token NX PX ttl` with a random token, released by a compare-and-delete script so a
 * holder whose lock already expired (and was taken by another) cannot release the new
 * holder's lock. A holder that dies or hangs loses it after its TTL; nothing else is
 * needed to unwedge a key. The lock only saves work: correctness of what ends up in the
 * cache rests on the versioned writes, never on the lock.
 */
import { randomBytes } from 'node:crypto';
import { runScript, script, type CacheRedisClient } from './redisClient.js';

const RELEASE = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

/** Takes the lock at `key` for `ttlMs`: its token, or undefined when another holds it. */
export async function acquireLock(client: CacheRedisClient, key: string, ttlMs: number): Promise<string | undefined> {
  const token = randomBytes(16).toString('hex');
  const reply = await client.sendCommand(['SET', key, token, 'NX', 'PX', String(ttlMs)]);
  return reply === null || reply === undefined ? undefined : token;
}

/** Releases the lock at `key` if `token` still holds it; true when it did. */
export async function releaseLock(client: CacheRedisClient, key: string, token: string): Promise<boolean> {
  return Number(await runScript(client, RELEASE, [key], [token])) === 1;
}
