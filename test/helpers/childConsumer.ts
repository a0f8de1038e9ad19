import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { waitFor } from './wait.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/consumerProcess.ts', import.meta.url));

export type ChildEvent = { event: string } & Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** test/fixtures/consumerProcess.ts (or another fixture that reports the same way) running in a child process. */
export interface ChildConsumer {
  process: ChildProcess;
  /** Every line it reported so far. */
  events: ChildEvent[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolve with the first reported event matching `match`. */
  waitForEvent(what: string, match: (e: ChildEvent) => boolean, timeoutMs?: number): Promise<ChildEvent>;
  /** SIGTERM and wait for the 'stopped' report and the exit. */
  stop(): Promise<ChildEvent>;
  stderr(): string;
  /** Its first and last reports and the end of its stderr, for an assertion's message. */
  describe(): string;
}

export function startChildConsumer(env: Record<string, string>, fixture = FIXTURE): ChildConsumer {
  const child = spawn(process.execPath, ['--import', 'tsx', fixture], {
    // Without NODE_TEST_CONTEXT: the child is a service, not a node:test subprocess.
    env: { ...withoutTestContext(process.env), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const events: ChildEvent[] = [];
  let buffered = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      try {
        events.push(JSON.parse(line) as ChildEvent);
      } catch {
        // not one of the fixture's reports
      }
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    // 'close', not 'exit': it comes after the last stdout line was read.
    child.once('close', (code, signal) => resolve({ code, signal }));
  });
  let done = false;
  void exited.then(() => {
    done = true;
  });
  const waitForEvent = (what: string, match: (e: ChildEvent) => boolean, timeoutMs = 60_000): Promise<ChildEvent> =>
    waitFor<ChildEvent>(
      what,
      () => {
        const found = events.find(match);
        if (found) return found;
        if (done) throw new Error(`child exited before ${what}; stderr: ${stderr.slice(-2000)}`);
        return undefined;
      },
      { timeoutMs, intervalMs: 20 },
    ).catch((error: Error) => {
      error.message += `\n${describe()}`;
      throw error;
    });
  const describe = (): string =>
    `first: ${JSON.stringify(events.slice(0, 2))}\nlast reports: ${events.slice(-12).map((e) => JSON.stringify(e)).join('\n')}\nstderr: ${stderr.slice(-2000)}`;
  return {
    process: child,
    events,
    exited,
    waitForEvent,
    async stop() {
      child.kill('SIGTERM');
      const stopped = await waitForEvent('stopped report', (e) => e.event === 'stopped', 30_000);
      await exited;
      return stopped;
    },
    stderr: () => stderr,
    describe,
  };
}

/**
 * `wait`, with what each of `children` reported last added to its error: a wait on the
 * database or the broker that times out says what the consumers were doing meanwhile.
 */
export async function explainedBy<T>(wait: Promise<T>, children: Record<string, ChildConsumer>): Promise<T> {
  try {
    return await wait;
  } catch (error) {
    if (error instanceof Error) {
      for (const [name, child] of Object.entries(children)) error.message += `\n--- ${name} ---\n${child.describe()}`;
    }
    throw error;
  }
}

function withoutTestContext(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { NODE_TEST_CONTEXT: _ignored, ...rest } = env;
  return rest;
}
