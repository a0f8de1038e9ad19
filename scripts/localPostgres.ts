/**
 * A throwaway PostgreSQL 15 instance of its own, for tests that stop and restart the
 * server (the fault-injection suite): the shared Postgres on 5432 is never touched.
 *
 * The data directory is made under /tmp. Postgres refuses to run as root, so when this
 * process is root the server binaries run as the `postgres` OS user (runuser), and the
 * directory belongs to that user.
 *
 * As a command:
 *   tsx scripts/localPostgres.ts start [--port N]   prints the connection string and the dir
 *   tsx scripts/localPostgres.ts stop --dir DIR     stops it and deletes DIR
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, chownSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { PORT_TAKEN, startOnFreePorts, type PortSource } from './ports.js';

const execFileAsync = promisify(execFile);

/** Where the PostgreSQL 15 server binaries are (PG_BIN overrides). */
export const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';

export interface LocalPostgresOptions {
  /** Client port; a free one when omitted. */
  port?: number;
  /** Parent of the instance's directory (default /tmp). */
  parentDir?: string;
  /** Extra server settings, name to value (passed as -c name=value). */
  settings?: Record<string, string | number>;
  /** How long start() waits for the server to accept connections, in ms (default 60000). */
  readyTimeoutMs?: number;
  /** Where the picked port comes from (tests hand out a taken one); `freePorts` by default. */
  portSource?: PortSource;
}

/** How the server is stopped. */
export type StopMode =
  /** Clean: disconnect clients, checkpoint, exit. */
  | 'fast'
  /** Crash-like: exit without a checkpoint; the next start replays the WAL. */
  | 'immediate';

/** A running local instance. */
export interface LocalPostgres {
  /** `postgres://postgres@127.0.0.1:PORT/postgres` (trust authentication). */
  readonly url: string;
  readonly port: number;
  /** The instance's directory: data, socket, log. */
  readonly dir: string;
  /** Start it again (same data, same port); resolves once it accepts connections. */
  start(): Promise<void>;
  /** Stop it; `immediate` is a crash (no checkpoint, WAL replay on the next start). */
  stop(mode?: StopMode): Promise<void>;
  /** Stop, then start. */
  restart(mode?: StopMode): Promise<void>;
  /** Stop (immediately) and delete the directory. Idempotent. */
  destroy(): Promise<void>;
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/** Run a server binary, as the postgres OS user when we are root. */
function pgCommand(binary: string, args: string[]): [string, string[]] {
  const path = join(PG_BIN, binary);
  return isRoot ? ['runuser', ['-u', 'postgres', '--', path, ...args]] : [path, args];
}

async function run(binary: string, args: string[], timeoutMs = 120_000): Promise<string> {
  const [cmd, argv] = pgCommand(binary, args);
  try {
    const { stdout, stderr } = await execFileAsync(cmd, argv, { timeout: timeoutMs, encoding: 'utf8' });
    return stdout + stderr;
  } catch (error) {
    const e = error as Error & { stdout?: string; stderr?: string };
    throw new Error(`${binary} ${args.join(' ')} failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

function postgresUid(): { uid: number; gid: number } {
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

async function waitUntilReady(url: string, timeoutMs: number, dir: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return;
    } catch (error) {
      last = error;
      await client.end().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const log = existsSync(join(dir, 'log')) ? readFileSync(join(dir, 'log'), 'utf8').slice(-2000) : '';
  throw new Error(`Postgres at ${url} not ready after ${timeoutMs} ms: ${(last as Error)?.message}\n${log}`);
}

/** initdb a fresh instance under /tmp and start it; resolves when it accepts connections. */
export async function startLocalPostgres(options: LocalPostgresOptions = {}): Promise<LocalPostgres> {
  if (options.port !== undefined) return startInstance(options, options.port);
  return startOnFreePorts(1, ([port]) => startInstance(options, port as number), (error) => PORT_TAKEN.test((error as Error)?.message ?? ''), {
    source: options.portSource,
  });
}

async function startInstance(options: LocalPostgresOptions, port: number): Promise<LocalPostgres> {
  const dir = mkdtempSync(join(options.parentDir ?? '/tmp', 'outbox-pg-'));
  const data = join(dir, 'data');
  if (isRoot) {
    const { uid, gid } = postgresUid();
    chownSync(dir, uid, gid);
  }
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const readyTimeoutMs = options.readyTimeoutMs ?? 60_000;
  const settings: Record<string, string | number> = {
    port,
    listen_addresses: '127.0.0.1',
    unix_socket_directories: dir,
    max_connections: 200,
    // A test server: the OS does not crash under it, so a Postgres crash (immediate
    // stop) still finds every write in the page cache; fsync would only cost time.
    fsync: 'off',
    full_page_writes: 'off',
    shared_buffers: '128MB',
    ...options.settings,
  };
  const serverOptions = Object.entries(settings)
    .map(([name, value]) => `-c ${name}=${value}`)
    .join(' ');
  let destroyed = false;

  await run('initdb', ['-D', data, '--auth=trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale=C']);
  // Written after initdb, which wants an empty data directory; readable by postgres.
  writeFileSync(join(dir, 'options'), serverOptions);

  const start = async (): Promise<void> => {
    if (destroyed) throw new Error('local Postgres was destroyed');
    await run('pg_ctl', ['-D', data, '-o', serverOptions, '-l', join(dir, 'log'), '-w', '-t', String(Math.ceil(readyTimeoutMs / 1000)), 'start']);
    await waitUntilReady(url, readyTimeoutMs, dir);
  };
  const stop = async (mode: StopMode = 'fast'): Promise<void> => {
    if (!existsSync(join(data, 'postmaster.pid'))) return;
    await run('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop']);
  };

  try {
    await start();
  } catch (error) {
    // The server's own log says why it did not start (a port taken since it was picked, say).
    const log = existsSync(join(dir, 'log')) ? readFileSync(join(dir, 'log'), 'utf8').slice(-2000) : '';
    await stop('immediate').catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`${(error as Error)?.message ?? String(error)}\n${log}`, { cause: error });
  }
  return {
    url,
    port,
    dir,
    start,
    stop,
    restart: async (mode: StopMode = 'fast') => {
      await stop(mode);
      await start();
    },
    destroy: async () => {
      if (destroyed) return;
      destroyed = true;
      await stop('immediate').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Stop an instance by its directory and delete it, synchronously: for process 'exit'
 * handlers, where nothing asynchronous runs any more.
 */
export function destroyLocalPostgresSync(dir: string): void {
  const data = join(dir, 'data');
  if (existsSync(join(data, 'postmaster.pid'))) {
    const [cmd, argv] = pgCommand('pg_ctl', ['-D', data, '-m', 'immediate', '-w', '-t', '30', 'stop']);
    try {
      execFileSync(cmd, argv, { stdio: 'ignore', timeout: 40_000 });
    } catch {
      // already gone
    }
  }
  rmSync(dir, { recursive: true, force: true });
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const flag = (name: string): string | undefined => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : undefined;
  };
  if (command === 'start') {
    const port = flag('--port');
    const instance = await startLocalPostgres({ port: port ? Number(port) : undefined });
    process.stdout.write(`${instance.url}\n${instance.dir}\n`);
  } else if (command === 'stop' && flag('--dir')) {
    destroyLocalPostgresSync(resolve(flag('--dir') as string));
  } else {
    process.stderr.write('usage: localPostgres.ts start [--port N] | stop --dir DIR\n');
    process.exit(2);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`localPostgres: ${(error as Error).message}\n`);
    process.exit(1);
  });
}
