/**
 * CI's fault suite (`npm run test:faults`): the commands of ciPlan.ts, two lanes at once,
 * each line of a command's output prefixed with its lane. Every command runs even when an
 * earlier one failed (a CI log then names every failure at once), and the run fails unless
 * every planned command ran exactly once and passed.
 *
 *   tsx test/faults/ci.ts [--lanes 1|2]     # --lanes 1: one after the other, in plan order
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { CI_FAULT_COMMANDS, lanesOf, planFailures, runLanes, type CommandOutcome, type FaultCommandPlan } from './ciPlan.js';
import { ROOT } from './snapshot.js';

function parseLanes(argv: string[]): number {
  if (argv.length === 0) return 2;
  if (argv.length === 2 && argv[0] === '--lanes') return Number(argv[1]);
  process.stderr.write('usage: tsx test/faults/ci.ts [--lanes 1|2]\n');
  process.exit(2);
}

const children = new Set<ReturnType<typeof spawn>>();
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    // run.ts stops its own processes and servers on a signal; pass it on and wait for them.
    stopping = true;
    for (const c of children) c.kill(signal);
  });
}

function runCommand(c: FaultCommandPlan): Promise<CommandOutcome> {
  const started = Date.now();
  const prefix = `[lane ${c.lane}] `;
  process.stdout.write(`${prefix}faults: ${c.args.join(' ')}\n`);
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test/faults/run.ts'), ...c.args], {
    cwd: ROOT,
    // C1-only brokers (scripts/kafkaJit.ts): less CPU for the suite's many short-lived JVMs.
    env: { ...process.env, OUTBOX_KAFKA_JIT: process.env.OUTBOX_KAFKA_JIT || 'quick', OUTBOX_FAULTS_LANE: String(c.lane) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const tail: string[] = [];
  for (const [stream, out] of [[child.stdout, process.stdout], [child.stderr, process.stderr]] as const) {
    createInterface({ input: stream }).on('line', (line) => {
      out.write(`${prefix}${line}\n`);
      tail.push(line);
      if (tail.length > TAIL_LINES) tail.shift();
    });
  }
  return new Promise((resolve) => {
    child.on('close', (code) => {
      children.delete(child);
      if (code !== 0) tails.set(c.args.join(' '), tail);
      resolve({ args: c.args, code, seconds: Math.round((Date.now() - started) / 1000) });
    });
  });
}

/** A failed command's last lines, printed again at the end: with two lanes its own lines are
 *  interleaved with the other lane's, and a CI log that keeps only its end still shows why. */
const TAIL_LINES = 40;
const tails = new Map<string, string[]>();

async function main(): Promise<number> {
  const lanes = lanesOf(CI_FAULT_COMMANDS, parseLanes(process.argv.slice(2)));
  const started = Date.now();
  const outcomes = await runLanes(lanes, runCommand, () => stopping);
  const seconds = Math.round((Date.now() - started) / 1000);
  process.stdout.write(`faults: ${lanes.length} lane(s), ${seconds} s in all\n`);
  for (const o of outcomes) process.stdout.write(`faults:   ${o.code === 0 ? 'passed' : 'FAILED'} in ${o.seconds} s: ${o.args.join(' ')}\n`);
  for (const [args, tail] of tails) {
    process.stdout.write(`faults: the last ${tail.length} lines of the failed command ${args}:\n`);
    for (const line of tail) process.stdout.write(`faults: | ${line}\n`);
  }
  const failures = planFailures(CI_FAULT_COMMANDS, outcomes);
  for (const f of failures) process.stdout.write(`${f}\n`);
  return failures.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`faults: ${(error as Error)?.stack ?? String(error)}\n`);
    process.exit(1);
  },
);
