/**
 * `outbox-relay run` itself (src/cli.ts bundled with esbuild, as bench/children.ts bundles
 * its child, so that no TypeScript loader runs in it) in processes of their own, for the
 * many-outboxes section: one process over a list of outboxes (OUTBOX_OUTBOXES and
 * OUTBOX_<NAME>_DATABASE_URL / _SCHEMA), or one per outbox (DATABASE_URL and OUTBOX_SCHEMA).
 * The real command rather than bench/child.ts's createRelay, because what is compared is
 * how the command is deployed: its metrics server, its group, its start-up.
 *
 * Also the /proc and pg_stat_activity readings the section needs on those processes: CPU
 * ticks sampled over time (so a window can be cut out afterwards), peak RSS, and which
 * process holds each Postgres connection (client port → pid, from `ss`).
 */
import { armHere } from './armFacts.js';
import { reportArmStarted } from './children.js';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { DATABASE_URL, brokers } from './common.js';
import { cpuTicks, TICKS_PER_SECOND } from './procCpu.js';
import { log, wall } from './util.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
// Two levels up from .cache/bench-build/ is the repository, where src/shared/schema.ts looks for sql/.
const CLI = join(ROOT, '.cache/bench-build/multiOutboxCli.mjs');
let built = false;

/** Bundle src/cli.ts into one plain JS file, once per process. */
export function buildCli(): void {
  if (built) return;
  execFileSync(
    join(ROOT, 'node_modules/.bin/esbuild'),
    ['src/cli.ts', '--bundle', '--platform=node', '--format=esm', '--target=node20', '--packages=external', `--outfile=${CLI}`, '--log-level=warning'],
    { cwd: ROOT, stdio: 'inherit' },
  );
  built = true;
}

/** One outbox as the section lays it out: a schema of the bench database. */
export interface OutboxPlace {
  /** The outbox's name in the list (OUTBOX_OUTBOXES), e.g. `o1`. */
  name: string;
  schema: string;
}

export interface RunProcess {
  pid: number;
  /** Wall-clock ms when it was spawned. */
  spawnedAt: number;
  outboxes: OutboxPlace[];
  /** Its exit code once it has exited (null while running, or when killed by a signal). */
  exitCode(): number | null;
  exited(): boolean;
  /** The last lines it wrote (logs on stdout, errors on stderr), for error messages. */
  tail(): string;
  /** SIGTERM (a soft stop, batches in flight finish), SIGKILL after 30 s; resolves with the exit code. */
  stop(): Promise<number | null>;
}

const TAIL_LINES = 40;
/** Warnings and errors of a relay process forwarded to the bench log, at most. */
const FORWARDED = 5;

/**
 * `outbox-relay run --metrics-address 127.0.0.1:0` over `outboxes`: one outbox the way a
 * single relay is deployed (DATABASE_URL, OUTBOX_SCHEMA), several as a list
 * (OUTBOX_OUTBOXES). Log level info (start and stop lines only; no per-batch logging).
 */
export function startRun(outboxes: OutboxPlace[], clientId: string): RunProcess {
  buildCli();
  const env: Record<string, string | undefined> = { ...process.env };
  // The command refuses DATABASE_URL beside a list, and an inherited OUTBOX_* would change the arm.
  for (const k of Object.keys(env)) if (k === 'DATABASE_URL' || k.startsWith('OUTBOX_')) delete env[k];
  Object.assign(env, { KAFKA_BROKERS: brokers().join(','), OUTBOX_CLIENT_ID: clientId, OUTBOX_LOG_LEVEL: 'info' });
  if (outboxes.length === 1) {
    Object.assign(env, { DATABASE_URL, OUTBOX_SCHEMA: outboxes[0]!.schema });
  } else {
    env.OUTBOX_OUTBOXES = outboxes.map((o) => o.name).join(',');
    for (const o of outboxes) {
      env[`OUTBOX_${o.name.toUpperCase()}_DATABASE_URL`] = DATABASE_URL;
      env[`OUTBOX_${o.name.toUpperCase()}_SCHEMA`] = o.schema;
    }
  }
  return spawnRun(env, [], outboxes, outboxes.map((o) => o.name).join(','));
}

/**
 * `outbox-relay run --tenant-… ` (docs/tenants.md): the tenant relay over the bench
 * database's tenants, with `args` (the rule and its settings) and DATABASE_URL.
 */
export function startTenantRun(args: string[], clientId: string): RunProcess {
  buildCli();
  const env: Record<string, string | undefined> = { ...process.env };
  for (const k of Object.keys(env)) if (k === 'DATABASE_URL' || k.startsWith('OUTBOX_')) delete env[k];
  Object.assign(env, { DATABASE_URL, KAFKA_BROKERS: brokers().join(','), OUTBOX_CLIENT_ID: clientId, OUTBOX_LOG_LEVEL: 'info' });
  return spawnRun(env, args, [], 'tenants');
}

function spawnRun(env: Record<string, string | undefined>, args: string[], outboxes: OutboxPlace[], name: string): RunProcess {
  const proc: ChildProcess = spawn(process.execPath, [CLI, 'run', '--metrics-address', '127.0.0.1:0', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const spawnedAt = wall();
  const lines: string[] = [];
  let forwarded = 0;
  const label = `relay ${proc.pid} (${name})`;
  const keep = (line: string): void => {
    lines.push(line);
    if (lines.length > TAIL_LINES) lines.shift();
    let level = 0;
    try {
      const entry = JSON.parse(line) as { level?: number; msg?: string; producer?: string; delivery?: string };
      level = entry.level ?? 0;
      // What each of its outboxes' relays runs on, as the relay logs it when it starts.
      if (entry.msg === 'relay started' && entry.producer !== undefined) reportArmStarted(armHere('relay', entry.producer, entry.delivery));
    } catch {
      level = 50; // not a log line: stderr, a crash
    }
    if (level >= 40 && forwarded < FORWARDED) {
      forwarded++;
      log(`${label}: ${line.slice(0, 300)}${forwarded === FORWARDED ? ' (further warnings not shown)' : ''}`);
    }
  };
  createInterface({ input: proc.stdout! }).on('line', keep);
  createInterface({ input: proc.stderr! }).on('line', keep);
  let code: number | null = null;
  let hasExited = false;
  const closed = new Promise<void>((resolve) =>
    proc.once('close', (c) => {
      code = c;
      hasExited = true;
      resolve();
    }),
  );
  if (proc.pid === undefined) throw new Error(`could not start ${CLI}`);
  return {
    pid: proc.pid,
    spawnedAt,
    outboxes,
    exitCode: () => code,
    exited: () => hasExited,
    tail: () => lines.join('\n'),
    stop: async () => {
      if (!hasExited) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
        await closed;
        clearTimeout(timer);
      }
      return code;
    },
  };
}

/**
 * CPU ticks of processes sampled over time, so that the CPU of any window can be cut out
 * afterwards (the window's start, the first claim, is known only from the table after the
 * drain). Between two samples the ticks are interpolated; before a pid's first sample they
 * count as 0 (a backend born during the window counts its whole life).
 */
export class TickSeries {
  private readonly samples = new Map<number, Array<[number, number]>>();

  record(pids: Iterable<number>): void {
    const t = wall();
    for (const pid of pids) {
      const ticks = cpuTicks(pid);
      if (ticks === undefined) continue;
      let s = this.samples.get(pid);
      if (!s) this.samples.set(pid, (s = []));
      s.push([t, ticks]);
    }
  }

  /** Ticks of `pid` at wall-clock `t`. */
  at(pid: number, t: number): number {
    const s = this.samples.get(pid) ?? [];
    if (s.length === 0 || t < s[0]![0]) return 0;
    for (let i = s.length - 1; i >= 0; i--) {
      const [ti, vi] = s[i]!;
      if (ti > t) continue;
      const next = s[i + 1];
      if (!next) return vi;
      return vi + ((next[1] - vi) * (t - ti)) / (next[0] - ti);
    }
    return 0;
  }

  /** Ticks of `pid` at its last sample. */
  last(pid: number): number {
    const s = this.samples.get(pid);
    return s && s.length > 0 ? s[s.length - 1]![1] : 0;
  }

  pids(): number[] {
    return [...this.samples.keys()];
  }

  /** CPU-seconds of `pids` (default: every pid seen) from `from` (wall ms) to their last sample. */
  secondsSince(from: number, pids: Iterable<number> = this.samples.keys()): number {
    let ticks = 0;
    for (const pid of pids) ticks += this.last(pid) - this.at(pid, from);
    return ticks / TICKS_PER_SECOND;
  }
}

/** Peak resident set (VmHWM) of a live process, bytes. */
export function peakRss(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/**
 * The pid behind each local TCP port connected to Postgres (`ss -tnpH`, our own children
 * only: ss names the process of sockets the user may see). pg_stat_activity.client_port
 * of a backend is the client's local port.
 */
export function postgresClientPids(): Map<number, number> {
  const port = new URL(DATABASE_URL).port || '5432';
  const out = execFileSync('ss', ['-tnpH', `dport = :${port}`], { encoding: 'utf8' });
  const byPort = new Map<number, number>();
  for (const line of out.split('\n')) {
    const m = /\S+:(\d+)\s+\S+:\d+\s+users:\(\("[^"]*",pid=(\d+)/.exec(line);
    if (m) byPort.set(Number(m[1]), Number(m[2]));
  }
  return byPort;
}
