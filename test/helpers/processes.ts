import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TEST_PRODUCER_ENV } from './producer.js';
import { bundleForNode } from '../../scripts/bundle.js';

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
 * NODE_OPTIONS, the adapter under test, where to report a relay on another one, the test
 * file it works for and the log of relay starts (CI's second pass), and the
 * Node major CI claims. The
 * rest of the environment is not inherited: each test says what its process sees.
 */
function guardEnv(): Record<string, string | undefined> {
  const { NODE_OPTIONS, OUTBOX_TEST_PRODUCER, OUTBOX_TEST_ADAPTER_REPORTS, OUTBOX_TEST_NODE_MAJOR, OUTBOX_TEST_FILE, OUTBOX_TEST_RELAY_LOG } = process.env;
  return { NODE_OPTIONS, OUTBOX_TEST_PRODUCER, OUTBOX_TEST_ADAPTER_REPORTS, OUTBOX_TEST_NODE_MAJOR, OUTBOX_TEST_FILE, OUTBOX_TEST_RELAY_LOG };
}

/**
 * Run the outbox-relay CLI from source, as a separate process (a relay on the adapter
 * under test): src/cli.ts bundled by {@link cliBundle}, not loaded through tsx, which
 * compiled the whole tree in every process: 1.2 CPU-seconds a start against 0.4, and the
 * refusal tests start hundreds.
 */
export function spawnCli(args: string[], env: Record<string, string | undefined>): Spawned {
  // A relay process runs on the adapter under test unless the test says otherwise. Node's
  // compile cache keeps the packages' compiled code between the hundreds of starts (the
  // refusal tests): 0.37 CPU-seconds a start without it, 0.25 with it, measured here.
  return spawnNode(cliBundle(), args, { NODE_COMPILE_CACHE: join(ROOT, '.cache', 'node-compile-cache'), ...TEST_PRODUCER_ENV, ...env });
}

let bundle: string | undefined;

/**
 * src/cli.ts bundled once per test process (scripts/bundle.ts), in a directory of this
 * process's own (.cache/cli-bundle-XXXX/cli.mjs, test files run side by side), removed
 * when the process exits.
 */
export function cliBundle(): string {
  if (bundle) return bundle;
  mkdirSync(join(ROOT, '.cache'), { recursive: true });
  const dir = mkdtempSync(join(ROOT, '.cache', 'cli-bundle-'));
  const file = join(dir, 'cli.mjs');
  bundleForNode('src/cli.ts', file);
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  bundle = file;
  return file;
}

/** Run a TypeScript file of this repo with node + tsx. */
export function spawnTs(file: string, args: string[], env: Record<string, string | undefined>): Spawned {
  return spawnNode(file, args, env, ['--import', 'tsx']);
}

function spawnNode(file: string, args: string[], env: Record<string, string | undefined>, nodeArgs: string[] = []): Spawned {
  const child = spawn(process.execPath, [...nodeArgs, file, ...args], {
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
