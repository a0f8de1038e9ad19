/**
 * The one thing the cache needs of a Redis client: sending a command. node-redis' client
 * (`createClient()` from `redis`, v6) fits as it is; anything else with the same
 * `sendCommand(args)` does too. The cache never imports `redis` itself, so the rest of
 * outbox-relay does not need it installed. Scripts run by EVALSHA, loaded with EVAL when
 * the server does not know them yet (after a restart or a SCRIPT FLUSH).
 */
import { createHash } from 'node:crypto';

/**
 * A connected Redis client as the cache uses it: node-redis' `RedisClientType` (from
 * `createClient()`) satisfies it. Connect it before use; the cache never connects, closes
 * or reconfigures it.
 */
export interface CacheRedisClient {
  /** Sends one command (its name and arguments) and resolves with the raw reply. */
  sendCommand(args: ReadonlyArray<string>): Promise<unknown>;
}

/** A Lua script with its SHA1, run by {@link runScript}. */
export interface Script {
  readonly source: string;
  readonly sha: string;
}

/** Makes a {@link Script} from its Lua source. */
export function script(source: string): Script {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/** Runs `s` on `keys` and `args`: EVALSHA, then EVAL once if the server has not seen it. */
export async function runScript(client: CacheRedisClient, s: Script, keys: readonly string[], args: readonly string[]): Promise<unknown> {
  const tail = [String(keys.length), ...keys, ...args];
  try {
    return await client.sendCommand(['EVALSHA', s.sha, ...tail]);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return client.sendCommand(['EVAL', s.source, ...tail]);
  }
}
