/**
 * The effect store on Redis: one string per key, written only by Lua scripts (each atomic,
 * each on one key, so Redis Cluster is fine), on the Redis server's clock (TIME):
 *
 *   r:<expires at, ms>:<token>   reserved by the attempt holding `token`, until that time
 *   c:<confirmed at, ms>         done
 *
 * Either lives `ttlMs` (PX) from its last write. A reservation past its time stays until
 * then, so the next attempt can tell a crashed attempt's leftover (taken over, and
 * counted) from a key never seen.
 */
import { ConfigError } from '../shared/errors.js';
import { boundedClient, runScript, script, type RedisCommandClient } from '../shared/redisCommands.js';
import type { ConfirmOutcome, EffectRecord, EffectStore, ReserveOutcome } from './store.js';

/** Options of {@link redisEffectStore}. */
export interface RedisEffectStoreOptions {
  /** Prefix of every Redis key the store writes, e.g. `'app:effects:'`. Default `'effect:'`. */
  prefix?: string;
  /**
   * How long the guard waits for any one Redis reply, whatever the client's own timeouts
   * and reconnect settings (ms). Past it the command counts as failed. Default 1000.
   */
  timeoutMs?: number;
}

// Lua numbers are doubles: milliseconds since 1970 are exact, and '%.0f' prints them whole.
const NOW = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/** KEYS[1]; ARGV: token, reservationMs, ttlMs, takeOver ('1' or '0'). Returns {state, ms}. */
const RESERVE = script(`${NOW}
local v = redis.call('GET', KEYS[1])
if v then
  if string.sub(v, 1, 2) == 'c:' then return {'done', 0} end
  local expires = tonumber(string.match(v, '^r:(%d+):'))
  if expires == nil then return redis.error_reply('effect store: ' .. KEYS[1] .. ' holds a value this store did not write') end
  if expires > now then return {'busy', expires - now} end
  if ARGV[4] ~= '1' then return {'in_doubt', now - expires} end
  redis.call('SET', KEYS[1], 'r:' .. string.format('%.0f', now + tonumber(ARGV[2])) .. ':' .. ARGV[1], 'PX', ARGV[3])
  return {'taken_over', now - expires}
end
redis.call('SET', KEYS[1], 'r:' .. string.format('%.0f', now + tonumber(ARGV[2])) .. ':' .. ARGV[1], 'PX', ARGV[3])
return {'reserved', 0}
`);

/** KEYS[1]; ARGV: token, reservationMs, ttlMs. 1 when the token held it (and now holds it longer). */
const RENEW = script(`${NOW}
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^r:%d+:(.+)$') == ARGV[1] then
  redis.call('SET', KEYS[1], 'r:' .. string.format('%.0f', now + tonumber(ARGV[2])) .. ':' .. ARGV[1], 'PX', ARGV[3])
  return 1
end
return 0
`);

/** KEYS[1]; ARGV: token, ttlMs. 'held' or 'unheld' (now done either way), or 'done' (done already, left alone). */
const CONFIRM = script(`${NOW}
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 2) == 'c:' then return 'done' end
redis.call('SET', KEYS[1], 'c:' .. string.format('%.0f', now), 'PX', ARGV[2])
if v and string.match(v, '^r:%d+:(.+)$') == ARGV[1] then return 'held' end
return 'unheld'
`);

/** KEYS[1]; ARGV: token. */
const RELEASE = script(`
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^r:%d+:(.+)$') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

/** KEYS[1]. Returns {value or false, pttl, now}. */
const INSPECT = script(`${NOW}
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), string.format('%.0f', now)}
`);

/**
 * An {@link EffectStore} on a connected node-redis client (`createClient()` from `redis`
 * 6, or anything with its `sendCommand(args)`). The store never connects, closes or
 * reconfigures the client. Several guards may share a client (give them different
 * prefixes, or keys that differ).
 * @throws ConfigError for a bad client or option
 */
export function redisEffectStore(client: RedisCommandClient, options: RedisEffectStoreOptions = {}): EffectStore {
  if (typeof client !== 'object' || client === null || typeof (client as { sendCommand?: unknown }).sendCommand !== 'function') {
    throw new ConfigError('redisEffectStore.client', 'must be a connected Redis client with sendCommand (node-redis createClient())');
  }
  if (typeof options !== 'object' || options === null) throw new ConfigError('redisEffectStore.options', 'must be an object');
  for (const k of Object.keys(options)) if (k !== 'prefix' && k !== 'timeoutMs') throw new ConfigError(`redisEffectStore.${k}`, 'is not an option (they are prefix, timeoutMs)');
  const prefix = options.prefix ?? 'effect:';
  if (typeof prefix !== 'string' || prefix.length > 200) throw new ConfigError('redisEffectStore.prefix', 'must be a string of at most 200 characters');
  const timeoutMs = options.timeoutMs ?? 1_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 600_000) throw new ConfigError('redisEffectStore.timeoutMs', `must be a whole number of milliseconds from 1 to 600000, got ${String(timeoutMs)}`);
  const redis = boundedClient(client, timeoutMs, 'redisEffectStore.timeoutMs');
  const run = (s: Parameters<typeof runScript>[1], key: string, args: string[]): Promise<unknown> => runScript(redis, s, [prefix + key], args);
  return {
    kind: 'redis',
    async reserve(key, token, o): Promise<ReserveOutcome> {
      const [state, ms] = (await run(RESERVE, key, [token, String(o.reservationMs), String(o.ttlMs), o.takeOver ? '1' : '0'])) as [string, number];
      const n = Number(ms);
      switch (state) {
        case 'reserved':
          return { state };
        case 'done':
          return { state };
        case 'busy':
          return { state, remainingMs: n };
        case 'taken_over':
        case 'in_doubt':
          return { state, expiredForMs: n };
        default:
          throw new Error(`effect store: unexpected reply ${String(state)} from Redis`);
      }
    },
    async renew(key, token, o) {
      return Number(await run(RENEW, key, [token, String(o.reservationMs), String(o.ttlMs)])) === 1;
    },
    async confirm(key, token, o): Promise<ConfirmOutcome> {
      const outcome = String(await run(CONFIRM, key, [token, String(o.ttlMs)]));
      if (outcome !== 'held' && outcome !== 'unheld' && outcome !== 'done') throw new Error(`effect store: unexpected reply ${outcome} from Redis`);
      return outcome;
    },
    async release(key, token) {
      return Number(await run(RELEASE, key, [token])) === 1;
    },
    async inspect(key): Promise<EffectRecord | undefined> {
      const [value, pttl, now] = (await run(INSPECT, key, [])) as [string | null, number, string];
      if (typeof value !== 'string') return undefined;
      const expiresInMs = Number(pttl);
      const at = Number(value.split(':')[1]);
      if (value.startsWith('c:')) return { state: 'done', confirmedAt: new Date(at), expiresInMs };
      return { state: 'reserved', reservedForMs: at - Number(now), expiresInMs };
    },
    async forget(key) {
      return Number(await redis.sendCommand(['DEL', prefix + key])) === 1;
    },
  };
}
