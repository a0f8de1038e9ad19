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
import { freePort } from '../../scripts/ports.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type RedisClientType } from 'redis';
import { listenOnLoopback } from './loopback.js';

/** A free TCP port on 127.0.0.1, below the ephemeral range (scripts/ports.ts). */
export { freePort };

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

/** A private redis-server of one test: its URL and pid, and ways to make it hang or go. */
export interface PrivateRedis {
  url: string;
  port: number;
  pid: number;
  /** SIGSTOP: the server keeps its connections but answers nothing (a hung Redis). */
  pause(): void;
  /** SIGCONT after pause(). */
  resume(): void;
  /** Stops it (SIGTERM, or SIGKILL) and waits for the exit; idempotent; removes its directory. */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
}


/**
 * A TCP server on 127.0.0.1 that accepts connections and never answers (a hung Redis as
 * a client sees it); close() ends it and its connections.
 */
export async function silentServer(): Promise<{ port: number; accepted(): number; close(): Promise<void> }> {
  const sockets = new Set<import('node:net').Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  });
  const port = await listenOnLoopback(server);
  return {
    port,
    accepted: () => accepted,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Starts a private redis-server (see the module comment); the caller stops it. */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-redis-'));
  const port = await freePort();
  let output = '';
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const spawnError = new Promise<never>((_, reject) => child.on('error', (e) => reject(new Error(`redis-server could not start: ${e.message}`))));
  const stop = async (signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      // A paused server would not act on SIGTERM until continued.
      child.kill('SIGCONT');
      child.kill(signal);
    }
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
    if (ok) {
      return {
        url: `redis://127.0.0.1:${port}`,
        port,
        pid: child.pid!,
        pause: () => void child.kill('SIGSTOP'),
        resume: () => void child.kill('SIGCONT'),
        stop,
      };
    }
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
  const server = shared ? { url: configured.toString(), stop: async () => undefined } : await startPrivateRedis();
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
