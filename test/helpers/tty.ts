import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { cliBundle, type Spawned } from './processes.js';

// The CLI on a terminal, for the tests of what it shows only there (the progress line,
// src/cli/progress.ts): util-linux's `script` (Debian's bsdutils, an essential package)
// runs it with a pseudo-terminal as its stdin, stdout and stderr, and copies what it
// writes there to its own stdout, carriage returns and all (line ends become \r\n).

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const quote = (arg: string): string => `'${arg.replaceAll("'", `'\\''`)}'`;

/**
 * Run the outbox-relay CLI from source on a pseudo-terminal. The environment is only what
 * `env` says, plus what the test harness needs to pass on (as spawnCli in processes.ts)
 * and TERM=xterm unless `env` sets TERM.
 */
export function spawnCliOnTty(args: string[], env: Record<string, string | undefined>): Spawned {
  const { NODE_OPTIONS, OUTBOX_TEST_PRODUCER, OUTBOX_TEST_ADAPTER_REPORTS, OUTBOX_TEST_NODE_MAJOR, OUTBOX_TEST_FILE, OUTBOX_TEST_RELAY_LOG } = process.env;
  const command = [process.execPath, cliBundle(), ...args].map(quote).join(' ');
  // -q no banner, -f flush at once, -e exit with the command's status, -c the command;
  // /dev/null: no typescript file.
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: ROOT,
    env: { NODE_OPTIONS, OUTBOX_TEST_PRODUCER, OUTBOX_TEST_ADAPTER_REPORTS, OUTBOX_TEST_NODE_MAJOR, OUTBOX_TEST_FILE, OUTBOX_TEST_RELAY_LOG, PATH: process.env.PATH, HOME: process.env.HOME, TERM: 'xterm', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout.on('data', (d: Buffer) => (text += d.toString()));
  child.stderr.on('data', (d: Buffer) => (text += d.toString()));
  const exited = new Promise<number | string>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)));
  return { child, output: () => text, exited };
}

/** The lines a terminal ends up showing: each \r goes back to the line's start, and what follows overwrites. */
export function screenLines(output: string): string[] {
  return output
    .replaceAll('\r\n', '\n')
    .split('\n')
    .map((line) => {
      const shown: string[] = [];
      let at = 0;
      for (const ch of line) {
        if (ch === '\r') at = 0;
        else shown[at++] = ch;
      }
      return shown.join('').trimEnd();
    })
    .filter((line) => line !== '');
}
