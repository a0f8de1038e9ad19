// Stampede across processes: 3 processes x 200 concurrent getOrLoad of one missing hot key
// call the loader once per process at most, and at most once per lock TTL in all.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { useRedis, type TestRedis } from './helpers/redis.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
let redis: TestRedis;
before(async () => {
  redis = await useRedis();
});
after(async () => {
  await redis?.stop();
});

interface ChildResult {
  loads: number;
  values: string[];
  errors: string[];
}

function startChild(env: Record<string, string>): { ready: Promise<void>; go(): void; result: Promise<ChildResult> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/cacheChild.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const lines = createInterface({ input: child.stdout });
  let onReady!: () => void;
  const ready = new Promise<void>((resolve) => (onReady = resolve));
  const result = new Promise<ChildResult>((resolve, reject) => {
    lines.on('line', (line) => {
      if (line === 'ready') onReady();
      else if (line.startsWith('{')) resolve(JSON.parse(line) as ChildResult);
    });
    child.on('exit', (code) => reject(new Error(`child exited (${code}) without a result: ${stderr.slice(-1000)}`)));
  });
  return { ready: Promise.race([ready, result.then(() => undefined)]), go: () => child.stdin.write('go\n'), result };
}

test('3 processes x 200 concurrent getOrLoad of an expired hot key: at most one loader call per process, at most one per lock TTL in all', async () => {
  const prefix = redis.prefix('procs');
  const lockTtlMs = 5_000;
  const children = [0, 1, 2].map(() => startChild({ REDIS_URL: redis.url, CACHE_PREFIX: prefix, CALLERS: '200', LOCK_TTL_MS: String(lockTtlMs), LOADER_MS: '300' }));
  await Promise.all(children.map((c) => c.ready));
  const started = Date.now();
  for (const c of children) c.go();
  const results = await Promise.all(children.map((c) => c.result));
  const elapsedMs = Date.now() - started;
  for (const r of results) {
    assert.deepEqual(r.errors, []);
    assert.ok(r.loads <= 1, `one loader call per process at most (${r.loads})`);
  }
  const total = Number(await redis.client.get(`${prefix}loads`));
  assert.equal(total, results.reduce((n, r) => n + r.loads, 0));
  assert.ok(total >= 1 && total <= 1 + Math.floor(elapsedMs / lockTtlMs), `${total} loader calls in ${elapsedMs} ms with a ${lockTtlMs} ms lock`);
  // Everyone got the one value that was loaded.
  assert.equal(new Set(results.flatMap((r) => r.values)).size, 1);
});
