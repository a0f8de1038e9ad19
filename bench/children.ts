/**
 * Relays and consumers in processes of their own (bench/child.ts, bundled with esbuild so
 * that no TypeScript loader runs in them), so that their RSS is their own and their event
 * loop is not the load generators'. The parent reads what they report on stdout.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { bundleForNode } from '../scripts/bundle.js';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { DATABASE_URL, brokers } from './common.js';
import type { ArmFacts } from './armFacts.js';

/**
 * Every arm a child reported since the last call of takeArmsStarted: the harness gives a
 * section's rows the arms that ran in it, when the section does not name each row's own.
 */
let armsStarted: ArmFacts[] = [];
/** An arm started otherwise (the real command, bench/multiOutboxRelays.ts), from what it reported. */
export function reportArmStarted(ran: ArmFacts): void {
  armsStarted.push(ran);
}
export function takeArmsStarted(): ArmFacts[] {
  const out = armsStarted;
  armsStarted = [];
  return out;
}

const ROOT = fileURLToPath(new URL('../', import.meta.url));
// Two directories under the repository, as scripts/bundle.ts requires.
const CHILD = join(ROOT, '.cache/bench-build/child.mjs');
let built = false;

/** Bundle bench/child.ts (and the code under test) into one plain JS file, once per process. */
export function buildChild(): void {
  if (built) return;
  bundleForNode('bench/child.ts', CHILD);
  built = true;
}

export interface Child {
  process: ChildProcess;
  /** [outbox id, wall ms] per acknowledged (relay), handled (consumer) or fetched (reader) message. */
  acks: Array<[number, number]>;
  rss: Array<[number, number]>;
  /** Relay: [wall ms, message, pid of the blocking backend it names] of each warning it logged. */
  warnings: Array<[number, string, number | undefined]>;
  peakRss: number;
  /** Relay: milliseconds in Kafka sends and in whole batches, summed, and rows acknowledged per client and mode (from its last line). */
  timing?: { sendMs: number; sends: number; batchMs: number; batches: number; ackedVia: Record<string, number>; ackedFramed?: number; markedFromProgress: number; batchErrors: number };
  /** What the relay or consumer in it announced when it started (set when `ready` resolves). */
  ran?: ArmFacts;
  ready: Promise<void>;
  stop(): Promise<void>;
}

/**
 * A relay (env BENCH_SCHEMA, BENCH_RELAY_OPTIONS as JSON), a consumer (env BENCH_SCHEMA,
 * BENCH_TOPIC, BENCH_GROUP, BENCH_PARTITIONS) or a bare read_committed reader (env
 * BENCH_TOPIC, BENCH_GROUP, BENCH_PARTITIONS) in a process of its own.
 */
export function startChild(mode: 'relay' | 'consumer' | 'reader' | 'queue', env: Record<string, string>): Child {
  buildChild();
  // What this arm is meant to run: a relay's producer and delivery as its options give
  // them, the relay's defaults otherwise; the child's announcement must agree.
  const relayOptions = JSON.parse(env.BENCH_RELAY_OPTIONS ?? '{}') as { producer?: string; delivery?: string };
  const expected = mode === 'relay' ? { client: relayOptions.producer ?? 'platformatic', delivery: relayOptions.delivery ?? 'at-least-once' } : { client: 'kafkajs' };
  const proc = spawn(process.execPath, [CHILD, mode], {
    env: { ...process.env, DATABASE_URL, KAFKA_BROKERS: brokers().join(','), NODE_PATH: join(ROOT, 'node_modules'), ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const child: Child = {
    process: proc,
    acks: [],
    warnings: [],
    rss: [],
    peakRss: 0,
    ready: undefined as unknown as Promise<void>,
    stop: async () => {
      if (proc.exitCode !== null) return;
      // 'close': after its stdout is read to the end (its last line carries the totals).
      const exited = new Promise((r) => proc.once('close', r));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
  child.ready = new Promise((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`bench child ${mode} exited with ${code} before it was ready`)));
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      let msg: { ready?: boolean; ran?: ArmFacts; t?: number; warning?: string; blockerPid?: number; rss?: number; acks?: Array<[number, number]>; done?: boolean; peakRss?: number; timing?: Child['timing'] };
      try {
        msg = JSON.parse(line);
      } catch {
        return; // a log line
      }
      if (msg.ready) {
        const ran = msg.ran;
        if (!ran || ran.client !== expected.client || ('delivery' in expected && ran.delivery !== expected.delivery)) {
          proc.kill('SIGTERM');
          reject(new Error(`bench child ${mode}: meant to run ${JSON.stringify(expected)}, but it reported ${JSON.stringify(ran ?? 'nothing')}`));
          return;
        }
        child.ran = ran;
        armsStarted.push(ran);
        resolve();
      }
      if (msg.acks) for (const a of msg.acks) child.acks.push(a);
      if (msg.warning !== undefined && msg.t !== undefined) child.warnings.push([msg.t, msg.warning, msg.blockerPid]);
      if (msg.rss !== undefined && msg.t !== undefined) {
        child.rss.push([msg.t, msg.rss]);
        child.peakRss = Math.max(child.peakRss, msg.rss);
      }
      if (msg.peakRss) child.peakRss = Math.max(child.peakRss, msg.peakRss);
      if (msg.timing) child.timing = msg.timing;
    });
  });
  return child;
}

/** Runs `body` with a relay child on `schema`, started and polling; stops it after. */
export async function withRelay<T>(schema: string, body: (relay: Child) => Promise<T>, relayOptions: Record<string, unknown> = {}): Promise<T> {
  const relay = startChild('relay', { BENCH_SCHEMA: schema, BENCH_RELAY_OPTIONS: JSON.stringify(relayOptions) });
  try {
    await relay.ready;
    return await body(relay);
  } finally {
    await relay.stop();
  }
}
