/**
 * A real PgBouncer (Debian's package, 1.18 on bookworm) in front of a Postgres, on a free
 * port, for the tests that prove the relay, the consumer, the cache and the operator
 * commands work behind a pooler (test/pgbouncer.*.integration.test.ts, the fault suite's
 * PgBouncer profile). The tests import it through test/helpers/pgbouncer.ts.
 *
 * `scripts/pgbouncer-install.sh` installs the package when `pgbouncer` is missing.
 * PgBouncer refuses to run as root, so when this process is root it runs as the
 * `postgres` OS user (runuser), and its directory (ini, auth file, pid file, log) belongs
 * to that user. It runs as a daemon (`-d`) and is known by its pid file, so the CLI can
 * start it in one process and stop it from another.
 *
 * As a command:
 *   tsx scripts/pgbouncer.ts start --dir DIR [--mode transaction|session] [--pg-port 5432]
 *                                  [--database test]     prints 127.0.0.1:PORT
 *   tsx scripts/pgbouncer.ts restart --dir DIR           stops it and starts it on the same port
 *   tsx scripts/pgbouncer.ts stop --dir DIR              stops it (the directory is kept)
 */
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { PORT_TAKEN, startOnFreePorts, type PortSource } from './ports.js';

/** How PgBouncer hands server connections to clients. */
/** PgBouncer's pool_mode; `statement` only to show what refuses the relay. */
export type PoolMode = 'transaction' | 'session' | 'statement';

export interface PgBouncerOptions {
  mode: PoolMode;
  /** Its directory (created if missing, handed to the postgres user); a fresh one under /tmp, deleted by stop(), when omitted. */
  dir?: string;
  /** The Postgres behind it (default 127.0.0.1:5432). */
  pgPort?: number;
  pgHost?: string;
  /** The database url() names by default and start() checks a query through (default `test`). */
  database?: string;
  /** Its client port; a free one when omitted. */
  port?: number;
  /** Server connections per database and user: small, so that clients really share them (default 10). */
  poolSize?: number;
  /** How long start() and restart() wait for it to accept connections, in ms (default 30000). */
  readyTimeoutMs?: number;
  /** Where the picked port comes from (tests hand out a taken one); `freePorts` by default. */
  portSource?: PortSource;
}

/** A running PgBouncer. */
export interface PgBouncer {
  readonly port: number;
  readonly mode: PoolMode;
  readonly dir: string;
  /** `postgres://postgres@127.0.0.1:PORT/<database>` (the options' database when omitted). */
  url(database?: string): string;
  /** Stop the process (by pid, until it is gone) and start a new one on the same port. */
  restart(): Promise<void>;
  /** Stop the process, until it is gone; deletes the directory when it made it. Idempotent. */
  stop(): Promise<void>;
  /** The running process' pid, if any. */
  pid(): number | undefined;
  /** A command on the admin console (`SHOW POOLS`, `SHOW SERVERS`, ...): its rows. */
  admin(command: string): Promise<Record<string, string | null>[]>;
}

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
const INI = 'pgbouncer.ini';
const PIDFILE = 'pgbouncer.pid';
const LOG = 'pgbouncer.log';

let binary: string | undefined;
/** The pgbouncer binary, installed by scripts/pgbouncer-install.sh if need be (once per process). */
export function pgbouncerBinary(): string {
  binary ??= execFileSync(join(ROOT, 'scripts/pgbouncer-install.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  return binary;
}

function postgresOwner(): { uid: number; gid: number } {
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

interface Settings {
  port: number;
  mode: PoolMode;
  pgHost: string;
  pgPort: number;
  poolSize: number;
}

function iniText(dir: string, s: Settings): string {
  return [
    '[databases]',
    // The fallback entry: every database name a client asks for, on the same server.
    `* = host=${s.pgHost} port=${s.pgPort}`,
    '',
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${s.port}`,
    // TCP only: no socket file to collide with the system's in /var/run/postgresql.
    'unix_socket_dir =',
    `pool_mode = ${s.mode}`,
    // The local Postgres trusts 127.0.0.1. With auth_user, a role missing from the auth
    // file is looked up in Postgres (auth_query), so the roles the tests create
    // (least-privilege role scripts) connect too.
    'auth_type = trust',
    `auth_file = ${join(dir, 'userlist.txt')}`,
    'auth_user = postgres',
    'admin_users = postgres',
    'stats_users = postgres',
    'max_client_conn = 1000',
    `default_pool_size = ${s.poolSize}`,
    'reserve_pool_size = 0',
    // JDBC and psql send it; PgBouncer 1.18 rejects startup parameters it does not know.
    'ignore_startup_parameters = extra_float_digits',
    `logfile = ${join(dir, LOG)}`,
    `pidfile = ${join(dir, PIDFILE)}`,
    '',
  ].join('\n');
}

/** The port the ini in `dir` listens on: what restart keeps. */
function readPort(dir: string): number {
  const ini = join(dir, INI);
  if (!existsSync(ini)) throw new Error(`no ${INI} in ${dir}: start it first`);
  const match = /^listen_port = (\d+)$/m.exec(readFileSync(ini, 'utf8'));
  if (!match?.[1]) throw new Error(`${ini} has no listen_port`);
  return Number(match[1]);
}

function readPid(dir: string): number | undefined {
  const file = join(dir, PIDFILE);
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, 'utf8').trim());
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** Alive and not a zombie (a daemon whose parent has not reaped it yet is gone for us). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

function logTail(dir: string): string {
  const file = join(dir, LOG);
  return existsSync(file) ? readFileSync(file, 'utf8').slice(-1500) : '(no log)';
}

/** What the log of `dir` gained past byte `from`. */
function logSince(dir: string, from: number): string {
  const file = join(dir, LOG);
  return existsSync(file) ? readFileSync(file).subarray(from).toString('utf8') : '';
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function query(url: string, text: string): Promise<Record<string, string | null>[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const result = await client.query<Record<string, string | null>>(text);
    return result.rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Stop the daemon in `dir` by its pid: SIGTERM (immediate shutdown), SIGKILL after 10 s; resolves once it is gone. */
export async function stopDaemon(dir: string): Promise<void> {
  const pid = readPid(dir);
  if (pid === undefined) return;
  if (alive(pid)) {
    process.kill(pid, 'SIGTERM');
    const deadline = Date.now() + 10_000;
    while (alive(pid) && Date.now() < deadline) await sleep(20);
    if (alive(pid)) process.kill(pid, 'SIGKILL');
    const killDeadline = Date.now() + 10_000;
    while (alive(pid) && Date.now() < killDeadline) await sleep(20);
    if (alive(pid)) throw new Error(`pgbouncer (pid ${pid}) in ${dir} survived SIGKILL`);
  }
  rmSync(join(dir, PIDFILE), { force: true });
}

/**
 * Start the daemon of `dir` (its ini written before) and wait until its admin console
 * answers, which needs no Postgres behind it (a fault test restarts PgBouncer while
 * Postgres is down). Returns its pid; throws with the log's tail when it exits.
 */
async function startDaemon(dir: string, port: number, timeoutMs: number): Promise<number> {
  // The log of earlier starts in this directory stays: this start's lines come after it.
  const logStart = existsSync(join(dir, LOG)) ? statSync(join(dir, LOG)).size : 0;
  const existing = readPid(dir);
  if (existing !== undefined && alive(existing)) throw new Error(`a pgbouncer (pid ${existing}) already runs in ${dir}`);
  rmSync(join(dir, PIDFILE), { force: true });
  const args = ['-d', join(dir, INI)];
  const [cmd, argv] = isRoot ? ['runuser', ['-u', 'postgres', '--', pgbouncerBinary(), ...args]] : [pgbouncerBinary(), args];
  try {
    execFileSync(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 });
  } catch (error) {
    const e = error as Error & { stderr?: Buffer };
    throw new Error(`pgbouncer -d ${join(dir, INI)} failed: ${e.stderr?.toString().trim() || e.message}\n${logTail(dir)}`);
  }
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/pgbouncer`;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    const pid = readPid(dir);
    if (pid !== undefined && !alive(pid)) throw new Error(`pgbouncer (pid ${pid}) exited on start:\n${logTail(dir)}`);
    // Its port taken: said at once in its log (this start's part), while whatever holds the
    // port may accept the readiness query and never answer it.
    const taken = logSince(dir, logStart).split('\n').find((line) => PORT_TAKEN.test(line));
    if (taken !== undefined) {
      await stopUnready(dir);
      throw new Error(`pgbouncer could not bind 127.0.0.1:${port}: ${taken}`);
    }
    try {
      await query(adminUrl, 'SHOW VERSION');
      // The pid file is written before the listener opens; read it again to be sure.
      const running = readPid(dir);
      if (running !== undefined && alive(running)) return running;
    } catch (error) {
      last = error;
    }
    await sleep(50);
  }
  const log = logTail(dir);
  // Nobody gets a handle on a daemon that did not become ready: left running, it would
  // hold its port and its connections to Postgres for good.
  await stopUnready(dir);
  throw new Error(`pgbouncer on 127.0.0.1:${port} not ready after ${timeoutMs} ms: ${(last as Error)?.message}\n${log}`);
}

/**
 * Stop a daemon of `dir` that did not become ready: by its command line (`-d
 * <dir>/pgbouncer.ini`), then by its pid file. `pgbouncer -d` forks twice (the second
 * child is the daemon, which writes the pid file) and returns once its first process has
 * exited: the middle process may still be about to fork the daemon. A single scan could
 * kill the middle one just after that fork and miss the daemon (CI saw one left running),
 * so the scan runs until two scans 100 ms apart find no process of `dir` (10 s at most).
 */
async function stopUnready(dir: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  let emptyScans = 0;
  while (emptyScans < 2 && Date.now() < deadline) {
    const pids = daemonsOf(dir).filter(alive);
    emptyScans = pids.length === 0 ? emptyScans + 1 : 0;
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    await sleep(100); // between scans, not a wait for a condition: see above
  }
  await stopDaemon(dir);
}

/** Live processes whose command line is a pgbouncer daemon of `dir`'s ini. */
export function daemonsOf(dir: string): number[] {
  const ini = join(dir, INI);
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.includes('-d') && argv.includes(ini) && !argv.includes('runuser')) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/**
 * Start PgBouncer in `mode` in front of a Postgres (127.0.0.1:5432 by default);
 * resolves once it accepts connections and a query went through it to the database.
 * The helper kills it when the process exits without stop().
 */
export async function startPgBouncer(options: PgBouncerOptions, { killOnExit = true } = {}): Promise<PgBouncer> {
  if (options.mode !== 'transaction' && options.mode !== 'session' && options.mode !== 'statement') {
    throw new Error(`mode must be transaction, session or statement, not ${String(options.mode)}`);
  }
  pgbouncerBinary();
  const madeDir = options.dir === undefined;
  const dir = resolve(options.dir ?? mkdtempSync('/tmp/outbox-pgbouncer-'));
  mkdirSync(dir, { recursive: true });
  if (isRoot) {
    const { uid, gid } = postgresOwner();
    chownSync(dir, uid, gid);
  }
  const database = options.database ?? 'test';
  const readyTimeoutMs = options.readyTimeoutMs ?? 30_000;
  const base = { mode: options.mode, pgHost: options.pgHost ?? '127.0.0.1', pgPort: options.pgPort ?? 5432, poolSize: options.poolSize ?? 10 };
  writeFileSync(join(dir, 'userlist.txt'), '"postgres" ""\n', { mode: 0o644 });

  // The ini names the port: written again for each port tried.
  const startOn = async (p: number): Promise<number> => {
    writeFileSync(join(dir, INI), iniText(dir, { ...base, port: p }), { mode: 0o644 });
    return startDaemon(dir, p, readyTimeoutMs);
  };
  let port: number;
  let pid: number | undefined;
  try {
    [port, pid] =
      options.port !== undefined
        ? [options.port, await startOn(options.port)]
        : await startOnFreePorts(1, async ([p]) => [p!, await startOn(p!)] as const, (error) => PORT_TAKEN.test((error as Error)?.message ?? ''), {
            source: options.portSource,
          });
  } catch (error) {
    if (madeDir) rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const url = (db = database): string => `postgres://postgres@127.0.0.1:${port}/${db}`;
  const onExit = (): void => {
    if (pid !== undefined && alive(pid)) process.kill(pid, 'SIGKILL');
    if (madeDir) rmSync(dir, { recursive: true, force: true });
  };
  if (killOnExit) process.on('exit', onExit);
  let stopped = false;
  const instance: PgBouncer = {
    port,
    mode: options.mode,
    dir,
    url,
    pid: () => (pid !== undefined && alive(pid) ? pid : undefined),
    admin: (command) => query(url('pgbouncer'), command),
    restart: async () => {
      if (stopped) throw new Error('pgbouncer was stopped');
      await stopDaemon(dir);
      pid = await startDaemon(dir, port, readyTimeoutMs);
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await stopDaemon(dir);
      pid = undefined;
      process.off('exit', onExit);
      if (madeDir) rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await query(url(), 'SELECT 1');
  } catch (error) {
    await instance.stop();
    throw new Error(`pgbouncer on 127.0.0.1:${port} started, but no query reached the database ${database} through it: ${(error as Error).message}\n${logTail(dir)}`);
  }
  return instance;
}

/** Restart the daemon of `dir` on its port (the CLI's restart). */
export async function restartPgBouncer(dir: string): Promise<number> {
  const port = readPort(dir);
  await stopDaemon(dir);
  await startDaemon(dir, port, 30_000);
  return port;
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const flag = (name: string): string | undefined => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : undefined;
  };
  const dir = flag('--dir');
  const usage = 'usage: pgbouncer.ts start --dir DIR [--mode transaction|session] [--pg-port 5432] [--database test] | restart --dir DIR | stop --dir DIR\n';
  if (!dir || !['start', 'stop', 'restart'].includes(command ?? '')) {
    process.stderr.write(usage);
    process.exit(2);
  }
  if (command === 'start') {
    const mode = flag('--mode') ?? 'transaction';
    const pgPort = flag('--pg-port');
    if ((mode !== 'transaction' && mode !== 'session') || (pgPort !== undefined && !/^\d+$/.test(pgPort))) {
      process.stderr.write(usage);
      process.exit(2);
    }
    const bouncer = await startPgBouncer({ mode, dir, pgPort: pgPort ? Number(pgPort) : undefined, database: flag('--database') }, { killOnExit: false });
    process.stdout.write(`127.0.0.1:${bouncer.port}\n`);
  } else if (command === 'restart') {
    process.stdout.write(`127.0.0.1:${await restartPgBouncer(resolve(dir))}\n`);
  } else {
    await stopDaemon(resolve(dir));
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`pgbouncer: ${(error as Error).message}\n`);
    process.exit(1);
  });
}
