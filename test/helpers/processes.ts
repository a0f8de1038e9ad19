import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { TEST_PRODUCER_ENV } from './producer.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Spawned {
  child: ChildProcess;
  /** stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code (or the signal's name). */
  exited: Promise<number | string>;
}

/**
 * What a child needs of the harness (test/helpers/adapterGuard.mjs): the preload, through
 * NODE_OPTIONS, the adapter under test, where to report a relay on another one, and the
 * Node major CI claims. The
 * rest of the environment is not inherited: each test says what its process sees.
 */
function guardEnv(): Record<string, string | undefined> {
  const { NODE_OPTIONS, OUTBOX_TEST_PRODUCER, OUTBOX_TEST_ADAPTER_REPORTS, OUTBOX_TEST_NODE_MAJOR } = process.env;
  return { NODE_OPTIONS, OUTBOX_TEST_PRODUCER, OUTBOX_TEST_ADAPTER_REPORTS, OUTBOX_TEST_NODE_MAJOR };
}

/** Run the outbox-relay CLI from source, as a separate process (a relay on the adapter under test). */
export function spawnCli(args: string[], env: Record<string, string | undefined>): Spawned {
  // A relay process runs on the adapter under test unless the test says otherwise.
  return spawnTs('src/cli.ts', args, { ...TEST_PRODUCER_ENV, ...env });
}

/** Run a TypeScript file of this repo with node + tsx. */
export function spawnTs(file: string, args: string[], env: Record<string, string | undefined>): Spawned {
  const child = spawn(process.execPath, ['--import', 'tsx', file, ...args], {
    cwd: ROOT,
    // Relays started by tests run side by side: metrics on any free port unless a test says otherwise.
    env: { ...guardEnv(), PATH: process.env.PATH, HOME: process.env.HOME, OUTBOX_METRICS_ADDRESS: '127.0.0.1:0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout?.on('data', (d: Buffer) => (text += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (text += d.toString()));
  const exited = new Promise<number | string>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  return { child, output: () => text, exited };
}
