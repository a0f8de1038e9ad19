/**
 * Redis for the cache tests: the one at TEST_REDIS_URL (default redis://127.0.0.1:6379)
 * when it answers PING, else a private `redis-server` started in a temporary directory on
 * a free port (no persistence), stopped again by `stop()`. CI relies on the second path.
 * Tests isolate themselves with {@link TestRedis.prefix}, a key prefix of their own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type RedisClientType } from 'redis';

export interface TestRedis {
  url: string;
  /** A connected client (closed by stop()). */
  client: RedisClientType;
  /** Another connected client (closed by stop()). */
  newClient(): Promise<RedisClientType>;
  /** A key prefix no other test uses. */
  prefix(name: string): string;
  /** Deletes the keys under the prefixes handed out, closes the clients, stops the private server if one was started. */
  stop(): Promise<void>;
}

/** True when a Redis at host:port answers PING within `timeoutMs`. */
export function pings(host: string, port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    let reply = '';
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d) => {
      reply += d.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
    socket.on('error', () => done(false));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

async function startPrivate(): Promise<{ url: string; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-redis-'));
  const port = await freePort();
  let output = '';
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const spawnError = new Promise<never>((_, reject) => child.on('error', (e) => reject(new Error(`redis-server could not start: ${e.message}`))));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  // Readiness: retry PING until the server answers (it announces nothing else we can wait on).
  for (;;) {
    const ok = await Promise.race([pings('127.0.0.1', port, 300), spawnError]).catch(async (e) => {
      await stop();
      throw e;
    });
    if (ok) return { url: `redis://127.0.0.1:${port}`, stop };
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`redis-server did not answer on port ${port}: ${output.slice(-500)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Redis for one test file: the shared one if it answers, else a private server. */
export async function useRedis(): Promise<TestRedis> {
  const configured = new URL(process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379');
  const shared = await pings(configured.hostname, Number(configured.port || 6379));
  const server = shared ? { url: configured.toString(), stop: async () => undefined } : await startPrivate();
  const clients: RedisClientType[] = [];
  const newClient = async (): Promise<RedisClientType> => {
    const c: RedisClientType = createClient({ url: server.url });
    c.on('error', () => undefined);
    await c.connect();
    clients.push(c);
    return c;
  };
  const client = await newClient();
  const prefixes: string[] = [];
  return {
    url: server.url,
    client,
    newClient,
    prefix: (name) => {
      const p = `test:${name}:${Date.now().toString(36)}${randomBytes(3).toString('hex')}:`;
      prefixes.push(p);
      return p;
    },
    stop: async () => {
      // Leave the shared Redis as it was: the keys under this file's prefixes go.
      for (const p of prefixes) {
        for await (const keys of client.scanIterator({ MATCH: `${p}*`, COUNT: 500 })) if (keys.length > 0) await client.del(keys).catch(() => undefined);
      }
      await Promise.all(clients.map((c) => c.close().catch(() => c.destroy())));
      await server.stop();
    },
  };
}
