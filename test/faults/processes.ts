/**
 * Child processes of the fault-injection suite (relays, consumers), each in a slot that
 * knows whether its process is meant to be running, so that an exit nobody asked for
 * (a relay that found Postgres down at start, say) is noticed and the process started
 * again, and so that every child can be killed on the way out.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, writeSync } from 'node:fs';

/** Every child ever started, for the exit handler. */
const allChildren = new Set<ChildProcess>();

/** SIGKILL every child still alive (synchronous: safe in a process 'exit' handler). */
export function killAllChildren(): void {
  for (const child of allChildren) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        child.kill('SIGCONT');
        child.kill('SIGKILL');
      } catch {
        // gone already
      }
    }
  }
}

export interface SlotOptions {
  name: string;
  /** Program and arguments, run with node. */
  args: string[];
  /** Load tsx first (default true): TypeScript programs need it, a bundle does not. */
  tsx?: boolean;
  cwd: string;
  env: Record<string, string | undefined>;
  /** Output goes here (appended). */
  logFile: string;
  /** Start it again this long after an exit nobody asked for (ms). */
  restartDelayMs: number;
  /** Give up restarting after this many unexpected exits. */
  maxUnexpectedExits: number;
  log: (line: string) => void;
  /** Each stdout line that parses as JSON (for the consumers' reports). */
  onReport?: (report: Record<string, unknown>) => void;
}

export class Slot {
  child: ChildProcess | undefined;
  /** running: alive and meant to be; paused: SIGSTOPped; down: killed by a fault; stopped: at the end. */
  state: 'running' | 'paused' | 'down' | 'stopped' = 'down';
  starts = 0;
  /** When the current (or last) process was spawned (epoch ms). */
  startedAt = 0;
  /** Set by a `{"event":"started"}` report of the current process (consumers). */
  ready = false;
  /** Reports of its processes, by event (`started`, `assigned`...): what they did. */
  readonly events: Record<string, number> = {};
  /** The events the current process reported (`hooks-ready`: its signal handlers are in). */
  currentEvents = new Set<string>();
  unexpectedExits = 0;
  readonly exitCodes: Array<number | string> = [];
  private lock: Promise<void> = Promise.resolve();
  private restartTimer: NodeJS.Timeout | undefined;

  constructor(readonly o: SlotOptions) {}

  /** Run `fn` when no other fault is working on this slot. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.lock.then(fn);
    this.lock = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }

  start(): void {
    if (this.state === 'stopped') return;
    const fd = openSync(this.o.logFile, 'a');
    const child = spawn(process.execPath, [...(this.o.tsx === false ? [] : ['--import', 'tsx']), ...this.o.args], {
      cwd: this.o.cwd,
      env: this.o.env,
      stdio: ['ignore', this.o.onReport ? 'pipe' : fd, fd],
    });
    closeSync(fd);
    allChildren.add(child);
    this.child = child;
    this.state = 'running';
    this.startedAt = Date.now();
    this.ready = false;
    this.currentEvents = new Set();
    this.starts++;
    if (this.o.onReport && child.stdout) {
      const logFd = openSync(this.o.logFile, 'a');
      let buffered = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        buffered += chunk;
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          try {
            const report = JSON.parse(line) as Record<string, unknown>;
            if (typeof report.event === 'string') this.events[report.event] = (this.events[report.event] ?? 0) + 1;
            if (report.event === 'started' && this.child === child) this.ready = true;
            if (typeof report.event === 'string' && this.child === child) this.currentEvents.add(report.event);
            this.o.onReport?.(report);
          } catch {
            // not a report
          }
          try {
            writeSync(logFd, line + '\n');
          } catch {
            // log file gone
          }
        }
      });
      child.once('close', () => closeSync(logFd));
    }
    child.once('exit', (code, signal) => {
      allChildren.delete(child);
      this.exitCodes.push(code ?? signal ?? -1);
      if (this.child !== child) return;
      this.child = undefined;
      if (this.state === 'running' || this.state === 'paused') {
        this.unexpectedExits++;
        this.o.log(`${this.o.name} exited by itself (${code ?? signal}); starting it again in ${this.o.restartDelayMs} ms`);
        this.state = 'down';
        if (this.unexpectedExits <= this.o.maxUnexpectedExits) {
          this.restartTimer = setTimeout(() => {
            this.restartTimer = undefined;
            if (this.state === 'down' && !this.child) this.start();
          }, this.o.restartDelayMs);
        } else {
          this.o.log(`${this.o.name}: too many unexpected exits, not restarting`);
        }
      }
    });
  }

  /** Send `signal` to the process and wait up to `timeoutMs` for it to exit by itself
   *  (a consumer armed to kill itself at its next commit); SIGKILL it after that.
   *  @returns whether it exited by itself, was SIGKILLed, or there was no process;
   *  `unhandled` when `signal` itself ended it: the process had no handler for it yet (a
   *  relay still loading after a restart), so it did not die where the fault meant it to */
  async signalAndAwaitExit(signal: NodeJS.Signals, timeoutMs: number): Promise<'by-itself' | 'unhandled' | 'killed' | 'no-process'> {
    const child = this.child;
    this.state = 'down';
    if (!child) return 'no-process';
    let exitSignal: NodeJS.Signals | null = null;
    const exited = new Promise<boolean>((r) =>
      child.once('exit', (_code, s) => {
        exitSignal = s;
        r(true);
      }),
    );
    child.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((r) => (timer = setTimeout(() => r(false), timeoutMs)));
    const byItself = await Promise.race([exited, timeout]);
    clearTimeout(timer);
    if (!byItself) {
      child.kill('SIGKILL');
      await exited;
    }
    if (byItself && exitSignal === signal) return 'unhandled';
    return byItself ? 'by-itself' : 'killed';
  }

  /** SIGKILL and wait for the exit; the slot is 'down' until start().
   *  @returns whether there was a process to kill */
  async kill(): Promise<boolean> {
    const child = this.child;
    this.state = 'down';
    if (!child) return false;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGKILL');
    await exited;
    return true;
  }

  /** SIGSTOP. @returns whether a running process was stopped */
  pause(): boolean {
    if (!this.child || this.state !== 'running') return false;
    this.child.kill('SIGSTOP');
    this.state = 'paused';
    return true;
  }

  resume(): void {
    if (!this.child || this.state !== 'paused') return;
    this.child.kill('SIGCONT');
    this.state = 'running';
  }

  /** Soft stop (SIGTERM), SIGKILL after `timeoutMs`; no restart afterwards. */
  async stop(timeoutMs: number): Promise<number | string | undefined> {
    if (this.restartTimer) clearTimeout(this.restartTimer);
    const wasPaused = this.state === 'paused';
    this.state = 'stopped';
    const child = this.child;
    if (!child) return undefined;
    const exited = new Promise<number | string>((r) => child.once('exit', (code, signal) => r(code ?? signal ?? -1)));
    if (wasPaused) child.kill('SIGCONT');
    child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs)));
    const outcome = await Promise.race([exited, timeout]);
    clearTimeout(timer);
    if (outcome === 'timeout') {
      this.o.log(`${this.o.name} did not stop within ${timeoutMs} ms; SIGKILL`);
      child.kill('SIGKILL');
      return exited;
    }
    return outcome;
  }
}
