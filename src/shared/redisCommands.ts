/**
 * Redis commands as outbox-relay's Redis helpers send them (the cache, src/cache/, and the
 * effect guard, src/effects/): through a client's `sendCommand(args)` alone, so neither
 * imports `redis` and the rest of outbox-relay does not need it installed. node-redis'
 * client (`createClient()` from `redis`, v6) fits as it is. Scripts run by EVALSHA,
 * loaded with EVAL when the server does not know them yet (after a restart or a SCRIPT
 * FLUSH).
 *
 * Every command can be bounded by a timeout of the helper's own ({@link boundedClient}):
 * a client's own timeouts are not ours to rely on (node-redis 6 keeps a command in its
 * offline queue for 5 s while it reconnects, and for ever on a connection whose server
 * accepted it and never answers).
 */
import { createHash } from 'node:crypto';

/**
 * A connected Redis client as the helpers use it: node-redis' `RedisClientType` (from
 * `createClient()`) satisfies it. The helpers never connect, close or reconfigure it.
 */
export interface RedisCommandClient {
  /**
   * Sends one command (its name and arguments) and resolves with the raw reply. The
   * helper passes an `abortSignal` it aborts when it gives the command up (node-redis then
   * drops it from its queue); a client may ignore it.
   */
  sendCommand(args: ReadonlyArray<string>, options?: { abortSignal?: AbortSignal }): Promise<unknown>;
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
export async function runScript(client: RedisCommandClient, s: Script, keys: readonly string[], args: readonly string[]): Promise<unknown> {
  const tail = [String(keys.length), ...keys, ...args];
  try {
    return await client.sendCommand(['EVALSHA', s.sha, ...tail]);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return client.sendCommand(['EVAL', s.source, ...tail]);
  }
}

/** Redis gave no reply within the helper's timeout: the cause of its Redis failures then. */
export class RedisNoReplyError extends Error {
  constructor(command: string, timeoutMs: number, state: string, setting = 'redisTimeoutMs') {
    super(`no reply to ${command} within ${timeoutMs} ms (${setting})${state ? `; ${state}` : ''}`);
    this.name = 'RedisNoReplyError';
  }
}

/** What the client says of its connection, when it says anything (node-redis' isOpen / isReady). */
function connectionState(client: RedisCommandClient): string {
  const c = client as { isOpen?: unknown; isReady?: unknown };
  if (c.isOpen === false) return 'the client is closed (outbox-relay never connects it: call connect())';
  if (c.isReady === false) return 'the client is not connected to Redis (it is reconnecting: Redis is down or unreachable)';
  if (c.isReady === true) return 'the client is connected, but Redis does not answer (hung or overloaded)';
  return '';
}

/**
 * `client` with every command given up after `timeoutMs`: the command's promise rejects
 * with {@link RedisNoReplyError} (naming `setting`, the option that set the timeout) and
 * the abort signal handed to the client fires.
 */
export function boundedClient(client: RedisCommandClient, timeoutMs: number, setting = 'redisTimeoutMs'): RedisCommandClient {
  return {
    sendCommand(args) {
      const controller = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          const error = new RedisNoReplyError(String(args[0]), timeoutMs, connectionState(client), setting);
          // First ours, then the client's: its abort rejects its promise at once, and the race must see our cause.
          reject(error);
          controller.abort(error);
        }, timeoutMs);
      });
      let sent: Promise<unknown>;
      try {
        sent = Promise.resolve(client.sendCommand(args, { abortSignal: controller.signal }));
      } catch (error) {
        clearTimeout(timer);
        return Promise.reject(error);
      }
      // Once given up, its own late failure (the abort, the client's timeout) is expected.
      sent.catch(() => undefined);
      return Promise.race([sent, timeout]).finally(() => clearTimeout(timer));
    },
  };
}

/**
 * One line for a Redis failure, never empty: node-redis rejects some with an empty
 * message (its TimeoutError), and a refused connection to a host with several addresses
 * is an AggregateError whose own message is empty.
 */
export function describeRedisFailure(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  const parts = error instanceof AggregateError ? error.errors.map((e) => describeRedisFailure(e)) : [];
  const own = error.message || (parts.length > 0 ? parts.join('; ') : `${error.name} (no message)`);
  return typeof code === 'string' && !own.includes(code) ? `${own} (${code})` : own;
}
