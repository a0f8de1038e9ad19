/**
 * What `npm run test:faults` runs (CI's fault suite): seven commands of test/faults/run.ts in
 * two lanes that run at once, each lane's commands one after the other. Pure: the plan and
 * the check of what ran; test/faults/ci.ts runs it.
 *
 * Why lanes: a fault run spends most of its time in its write window (40-60 s of writers at a
 * few hundred rows/s, faults meanwhile), where the machine is far from busy, and each run has
 * its own Postgres, Kafka and PgBouncer on free ports and its own copy of the code, so two
 * runs do not share state. The two 3-node cluster profiles sit in different lanes, one
 * first and one last, so that six brokers rarely run at once.
 */

export interface FaultCommandPlan {
  /** 1 or 2. */
  lane: number;
  /** The arguments of test/faults/run.ts. */
  args: string[];
}

export const CI_FAULT_COMMANDS: readonly FaultCommandPlan[] = [
  // Balanced on the clean-clone CI run of d6dabfe: cluster-ci 132, ci on kafkajs 63,
  // pooler-ci 69, multi-ci 71 s (335) against ci with its planted runs 157 and eos-cluster-ci
  // with its own 159 s (316); the lanes were 352 and 299 s. The next run (dcfe195) took 381
  // and 318 s, the phase 386 s against 356: the two cores were 92 % busy through it, so the
  // lanes share the CPU and their split moves little (docs/ci-times.md). The
  // clusters: lane 1's first (to 155 s in dcfe195's run), lane 2's last (from 164 s). A run of
  // 4b17a04 tried ci on kafkajs first in lane 2, beside cluster-ci's start: its consumer
  // join missed its window (self-check 0 of 1), so it runs after cluster-ci here.
  { lane: 1, args: ['--profile', 'cluster-ci'] },
  { lane: 1, args: ['--profile', 'ci', '--producer', 'kafkajs'] },
  { lane: 1, args: ['--profile', 'pooler-ci'] },
  // multi-ci without its planted runs, as pooler-ci (CI time): the same two planted bugs
  // run in the ci profile and eos-cluster-ci's own.
  { lane: 1, args: ['--profile', 'multi-ci'] },
  { lane: 2, args: ['--profile', 'ci', '--verify-planted'] },
  // tenants-ci (no planted runs: no consumers to plant a bug in; its wrong-tenant check is
  // shown able to fail by test/unit/faultsChecker.test.ts). In lane 2, the shorter before
  // it: the clean-clone CI run of 9919f9a took 61 s for it (a run of 49 s), the lanes 288
  // and 302 s, the phase 305 s (docs/ci-times.md). Before eos-cluster-ci, which then starts
  // after lane 1's cluster-ci has ended.
  { lane: 2, args: ['--profile', 'tenants-ci'] },
  { lane: 2, args: ['--profile', 'eos-cluster-ci', '--verify-planted'] },
];

/** The plan's commands grouped into `lanes` lanes: with 1, all in one lane in plan order. */
export function lanesOf(plan: readonly FaultCommandPlan[], lanes: number): FaultCommandPlan[][] {
  if (!Number.isInteger(lanes) || lanes < 1) throw new Error(`faults: --lanes must be a whole number ≥ 1, got ${lanes}`);
  const numbers = [...new Set(plan.map((c) => c.lane))].sort((a, b) => a - b);
  if (lanes === 1) return [numbers.flatMap((n) => plan.filter((c) => c.lane === n))];
  if (lanes !== numbers.length) throw new Error(`faults: the plan has ${numbers.length} lanes; --lanes takes 1 or ${numbers.length}`);
  return numbers.map((n) => plan.filter((c) => c.lane === n));
}

export interface CommandOutcome {
  args: string[];
  /** The exit code of run.ts, or null when it did not run (or was killed by a signal). */
  code: number | null;
  seconds: number;
}

/** Lines saying what did not hold: a planned command that did not run, ran twice or failed. */
export function planFailures(plan: readonly FaultCommandPlan[], outcomes: readonly CommandOutcome[]): string[] {
  const key = (args: readonly string[]): string => args.join(' ');
  const failures: string[] = [];
  for (const c of plan) {
    const ran = outcomes.filter((o) => key(o.args) === key(c.args));
    if (ran.length === 0) failures.push(`faults: planned command did not run: ${key(c.args)}`);
    else if (ran.length > 1) failures.push(`faults: planned command ran ${ran.length} times: ${key(c.args)}`);
    else if (ran[0]!.code !== 0) failures.push(`faults: failed (exit ${ran[0]!.code ?? 'signal'}): ${key(c.args)}`);
  }
  for (const o of outcomes) if (!plan.some((c) => key(c.args) === key(o.args))) failures.push(`faults: ran a command outside the plan: ${key(o.args)}`);
  return failures;
}

/**
 * Run the lanes at once, each lane's commands one after the other: a failed command does
 * not end its lane (a CI log then names every failure); once `stopped()` says so (a
 * signal), no further command starts. Outcomes in the order the commands ended.
 */
export async function runLanes(lanes: FaultCommandPlan[][], run: (c: FaultCommandPlan) => Promise<CommandOutcome>, stopped: () => boolean): Promise<CommandOutcome[]> {
  const outcomes: CommandOutcome[] = [];
  await Promise.all(
    lanes.map(async (lane) => {
      for (const c of lane) {
        if (stopped()) return;
        outcomes.push(await run(c));
      }
    }),
  );
  return outcomes;
}
