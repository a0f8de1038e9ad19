/**
 * A real schema registry (Apicurio Registry, Confluent-compatible API at /apis/ccompat/v7) on
 * 127.0.0.1, run from the build scripts/registry-fetch.sh makes (.cache/registry/app). Used by the tests of the
 * schema-registry encodings; never by the relay itself.
 *
 * As a command:
 *   tsx scripts/localRegistry.ts start [--dir DIR] [--port N]   prints the registry's URL
 *   tsx scripts/localRegistry.ts stop  [--dir DIR]
 *
 * Storage is an H2 database file in the directory, so a registry killed and started again
 * serves the schemas (and ids) it had: a consumer's cached ids stay valid across an outage,
 * as they do with a real deployment's durable storage.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PORT_TAKEN, startOnFreePorts, type PortSource } from './ports.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const JAR = join(ROOT, '.cache/registry/app/quarkus-run.jar');
const LOG = 'registry.log';
const PID = 'registry.pid';

/** A running local registry. */
export interface LocalRegistry {
  /** `http://127.0.0.1:PORT/apis/ccompat/v7`: the base URL a Confluent client takes. */
  readonly url: string;
  readonly port: number;
  /** The JVM's pid; 0 while stopped. */
  readonly pid: number;
  /** Holds the log and the database. */
  readonly dir: string;
  /** SIGTERM, SIGKILL after 10 s; schemas stay in `dir` (file storage). */
  stop(): Promise<void>;
  /** SIGKILL at once, for outage tests; returns before the JVM is gone (`start` waits for that). */
  kill(): void;
  /** Start again on the same port and database, after `stop` or `kill`; resolves when it serves requests. */
  start(): Promise<void>;
}

export interface LocalRegistryOptions {
  /** Directory for the log and the database; wiped at start. A new one under .cache/registry/run when omitted. */
  dir?: string;
  /** HTTP port; a free one when omitted. */
  port?: number;
  /** Detach the JVM so it outlives this process (the `start` command). Otherwise it is killed when this process exits. */
  detached?: boolean;
  /** `file` (default): H2 database in `dir`, kept across restarts. `memory`: forgotten at every stop. */
  storage?: 'file' | 'memory';
  /** Milliseconds to wait for the registry to answer; 60 s by default. */
  readyTimeoutMs?: number;
  /** Where a picked port comes from (tests hand out a taken one); `freePorts` by default. */
  portSource?: PortSource;
}

/** Build the registry's jar unless it is built (scripts/registry-fetch.sh; minutes the first time). */
export function fetchRegistryJar(): void {
  execFileSync(join(ROOT, 'scripts/registry-fetch.sh'), { stdio: ['ignore', 'inherit', 'inherit'] });
}

/** Start a registry with empty storage; resolves when GET /subjects answers 200. */
export async function startLocalRegistry(options: LocalRegistryOptions = {}): Promise<LocalRegistry> {
  fetchRegistryJar();
  const dir = resolve(options.dir ?? join(ROOT, '.cache/registry/run', `registry-${process.pid}-${Date.now()}`));
  if (options.port !== undefined) return startRegistry(dir, options.port, options);
  return startOnFreePorts(1, ([port]) => startRegistry(dir, port as number, options), portTaken, { source: options.portSource });
}

function portTaken(error: unknown): boolean {
  return PORT_TAKEN.test((error as Error)?.message ?? '');
}

async function startRegistry(dir: string, port: number, options: LocalRegistryOptions): Promise<LocalRegistry> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const url = `http://127.0.0.1:${port}/apis/ccompat/v7`;
  const detached = options.detached ?? false;
  // WRITE_DELAY=0: H2 otherwise writes a commit up to a second later, and a registry killed
  // within that second comes back without the schema it had just answered an id for.
  const database = options.storage === 'memory' ? 'jdbc:h2:mem:registry' : `jdbc:h2:file:${join(dir, 'db', 'registry')};WRITE_DELAY=0`;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  // Killed but maybe not yet reaped: start() then waits for the exit instead of returning.
  let killed = false;

  const onExit = (): void => {
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    if (options.dir === undefined) rmSync(dir, { recursive: true, force: true });
  };
  if (!detached) process.on('exit', onExit);

  const running = (): boolean => child !== undefined && child.exitCode === null && child.signalCode === null;
  // The child is unref'd: a timer keeps this process alive while it waits for the exit.
  const untilExited = async (killAfterMs?: number): Promise<void> => {
    const timer = setInterval(() => child?.kill('SIGKILL'), killAfterMs ?? 2 ** 31 - 1);
    await exited;
    clearInterval(timer);
  };
  const stop = async (): Promise<void> => {
    if (!running()) return;
    child?.kill('SIGTERM');
    await untilExited(10_000);
  };
  const start = async (): Promise<void> => {
    if (running() && !killed) return;
    // A killed JVM may still hold the port for a moment.
    await untilExited();
    killed = false;
    const from = existsSync(join(dir, LOG)) ? statSync(join(dir, LOG)).size : 0;
    const out = openSync(join(dir, LOG), 'a');
    const mine = spawn(
      'java',
      [
        '-Xmx160m',
        '-XX:+UseSerialGC',
        '-XX:TieredStopAtLevel=1',
        `-Dquarkus.http.port=${port}`,
        '-Dquarkus.http.host=127.0.0.1',
        `-Dquarkus.datasource.jdbc.url=${database}`,
        '-jar',
        JAR,
      ],
      { stdio: ['ignore', out, out], detached },
    );
    closeSync(out);
    child = mine;
    exited = new Promise((done) => mine.once('exit', () => done()));
    writeFileSync(join(dir, PID), String(mine.pid ?? 0));
    // Never the reason this process keeps running: a test file's process must end when its
    // tests do (and then kills the JVM, see onExit), a detached one outlives it anyway.
    mine.unref();
    try {
      await waitUntilReady(url, mine, join(dir, LOG), from, options.readyTimeoutMs ?? 60_000);
    } catch (error) {
      // Nobody gets a handle on a registry that failed to start: a detached JVM left running
      // would hold its port and memory for good.
      mine.kill('SIGKILL');
      await untilExited();
      rmSync(join(dir, PID), { force: true });
      const tail = logSince(join(dir, LOG), from).slice(-2000);
      throw new Error(`${(error as Error).message}\n--- ${join(dir, LOG)} (end)\n${tail}`, { cause: error });
    }
  };

  try {
    await start();
  } catch (error) {
    if (!detached) process.off('exit', onExit);
    if (options.dir === undefined) rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url,
    port,
    get pid() {
      return running() ? (child?.pid ?? 0) : 0;
    },
    dir,
    stop,
    kill: () => {
      if (!running()) return;
      killed = true;
      child?.kill('SIGKILL');
    },
    start,
  };
}

/** This start's part of the log (past `from`). */
function logSince(file: string, from: number): string {
  return existsSync(file) ? readFileSync(file).subarray(from).toString('utf8') : '';
}

/**
 * Poll every 100 ms until this JVM's log says it listens and GET {url}/subjects answers 200;
 * fail at once when the JVM exits. The log line matters: another registry already on the port
 * answers 200 too, while ours is failing to bind it.
 */
async function waitUntilReady(url: string, child: ChildProcess, log: string, from: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const port = new URL(url).port;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    const text = logSince(log, from);
    // Quarkus' own words for a taken port; reworded so that PORT_TAKEN (startOnFreePorts) sees it.
    const taken = new RegExp(`Port ${port} seems to be in use`).exec(text);
    if (taken) throw new Error(`the registry could not bind a port: Address already in use (${taken[0]})`);
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the registry exited (${child.exitCode ?? child.signalCode}) while starting`);
    if (text.includes(`Listening on: http://127.0.0.1:${port}`)) {
      try {
        const response = await fetch(`${url}/subjects`, { signal: AbortSignal.timeout(2000) });
        await response.arrayBuffer();
        if (response.status === 200) return;
        last = `HTTP ${response.status}`;
      } catch (error) {
        last = (error as Error).message;
      }
    } else {
      last = 'not listening yet';
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`the registry at ${url} was not ready after ${timeoutMs} ms (last: ${last})`);
}

/** Stop a registry started detached in `dir` (reads its pid file). */
export async function stopLocalRegistry(dir: string): Promise<void> {
  const file = join(resolve(dir), PID);
  if (!existsSync(file)) return;
  const pid = Number(readFileSync(file, 'utf8'));
  const alive = (): boolean => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (pid > 0 && alive()) {
    process.kill(pid, 'SIGTERM');
    for (const deadline = Date.now() + 10_000; alive() && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 100));
    if (alive()) process.kill(pid, 'SIGKILL');
  }
  rmSync(file, { force: true });
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const flag = (name: string): string | undefined => {
    const i = rest.indexOf(name);
    return i >= 0 ? rest[i + 1] : undefined;
  };
  const dir = flag('--dir') ?? join(ROOT, '.cache/registry/run/default');
  if (command === 'start') {
    const port = flag('--port');
    const registry = await startLocalRegistry({ dir, port: port ? Number(port) : undefined, detached: true });
    process.stdout.write(`${registry.url}\n`);
  } else if (command === 'stop') {
    await stopLocalRegistry(dir);
  } else {
    process.stderr.write('usage: localRegistry.ts start|stop [--dir DIR] [--port N]\n');
    process.exit(2);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`localRegistry: ${(error as Error).message}\n`);
    process.exit(1);
  });
}
