/**
 * A process of the cross-process stampede test (test/cacheStampede.integration.test.ts):
 * connects to REDIS_URL, prints "ready", waits for "go" on stdin, then makes CALLERS
 * concurrent getOrLoad calls of one key (CACHE_PREFIX + "hot"), whose loader takes
 * LOADER_MS and counts itself in Redis (CACHE_PREFIX + "loads"). Prints one JSON line:
 * its loader calls, the distinct values its callers got, and errors.
 */
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from 'redis';
import { createCache } from '../../src/cache/cache.js';

const url = process.env.REDIS_URL!;
const prefix = process.env.CACHE_PREFIX!;
const callers = Number(process.env.CALLERS ?? 200);
const lockTtlMs = Number(process.env.LOCK_TTL_MS ?? 5000);
const loaderMs = Number(process.env.LOADER_MS ?? 200);

const client = createClient({ url });
client.on('error', () => undefined);
await client.connect();
const cache = createCache({ client, prefix, defaults: { ttlMs: 60_000, lockTtlMs } });
const lines = createInterface({ input: process.stdin });
process.stdout.write('ready\n');
for await (const line of lines) if (line.trim() === 'go') break;
lines.close();

let loads = 0;
const results = await Promise.allSettled(
  Array.from({ length: callers }, () =>
    cache.getOrLoad('hot', async () => {
      loads++;
      const n = await client.incr(`${prefix}loads`);
      await sleep(loaderMs);
      return { n, pid: process.pid };
    }),
  ),
);
const values = new Set(results.flatMap((r) => (r.status === 'fulfilled' ? [JSON.stringify(r.value)] : [])));
const errors = results.flatMap((r) => (r.status === 'rejected' ? [String((r.reason as Error)?.message ?? r.reason)] : []));
process.stdout.write(`${JSON.stringify({ loads, values: [...values], errors })}\n`);
await client.close();
