/**
 * The fault-injection suite: proves, by running it, that the relay and the consumer
 * runtime lose nothing, apply nothing twice and reorder no key under faults.
 *
 *   tsx test/faults/run.ts --profile smoke|ci|multi-ci|tenants-ci|pooler-ci|cluster-ci|cluster|long [--seed N] [--rows N] [--relays N]
 *                          [--plant dedup-off|horizon-off|progress-off] [--verify-planted] [--no-snapshot]
 *                          [--producer kafkajs|platformatic]   (the relays' adapter, OUTBOX_PRODUCER)
 *                          [--committed-src]   (src/ and sql/ from HEAD, not the working tree)
 *
 * This file parses the arguments and runs. The rest, by concept: profiles.ts (what a run
 * runs), snapshot.ts (the code under test), servers.ts (Postgres and Kafka of our own),
 * harness.ts (one run; tenantHarness.ts for the tenant profiles), sightings.ts (what ran, seen from outside: relays, PgBouncer clients), inject.ts (the faults), checker.ts (the verdict on what came out),
 * selfCheck.ts (the verdict on what ran), report.ts. docs/faults.md has the method and the
 * results.
 *
 * Exit code 0 when lost, rolled-back delivered, duplicate effects and reorderings are all
 * 0, everything drained, and every run ran the relays, consumers, broker and faults its
 * profile says (and, with --verify-planted, when each planted bug was caught); 1 otherwise.
 */
import { appendFileSync } from 'node:fs';
import { killAllChildren } from './processes.js';
import { runOnce } from './harness.js';
import { runTenantsOnce } from './tenantHarness.js';
import { elapsedMs, log } from './log.js';
import { PLANTS, PRODUCERS, PROFILES, planRuns, type Plant, type Producer, type RunRequest } from './profiles.js';
import { judge, printReport, saveReport, type RunReport } from './report.js';
import { formatLine, runsCheck } from './selfCheck.js';
import { onEmergency, startServers, stopServers, type Servers } from './servers.js';
import { readCodeVersion, removeSnapshot, ROOT, snapshotCode } from './snapshot.js';

interface Args extends RunRequest {
  snapshot: boolean;
  /** src/ and sql/ as committed (HEAD), not the working tree's. */
  committedSrc: boolean;
  /** Run the relays and consumers from this tree instead (a patched copy, say). */
  codeDir?: string;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { profile: 'ci', seed: Math.floor(Math.random() * 2 ** 31), plant: 'none', verifyPlanted: false, snapshot: true, committedSrc: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) usage(`${a} needs a value`);
      return v as string;
    };
    if (a === '--profile') args.profile = value();
    else if (a === '--seed') args.seed = Number(value());
    else if (a === '--rows') args.rows = Number(value());
    else if (a === '--relays') args.relays = Number(value());
    else if (a === '--plant') args.plant = value() as Plant;
    else if (a === '--verify-planted') args.verifyPlanted = true;
    else if (a === '--no-snapshot') args.snapshot = false;
    else if (a === '--committed-src') args.committedSrc = true;
    else if (a === '--code-dir') args.codeDir = value();
    else if (a === '--producer') args.producer = value() as Producer;
    else usage(`unknown argument ${a}`);
  }
  if (!PROFILES[args.profile]) usage(`unknown profile ${args.profile}`);
  if (!['none', ...PLANTS].includes(args.plant)) usage(`unknown plant ${args.plant}`);
  if (args.producer !== undefined && !PRODUCERS.includes(args.producer)) usage(`unknown producer ${args.producer} (${PRODUCERS.join(' or ')})`);
  if (args.plant !== 'none' && args.verifyPlanted) usage('--plant and --verify-planted do not go together');
  // Their runs have no consumers (no dedup to plant against) and no planted run of their own.
  if (PROFILES[args.profile]!.tenants && (args.plant !== 'none' || args.verifyPlanted)) usage(`profile ${args.profile} has no planted runs`);
  if (!Number.isSafeInteger(args.seed) || args.seed < 0) usage('--seed must be a non-negative integer');
  if (args.rows !== undefined && !(Number.isSafeInteger(args.rows) && args.rows > 0)) usage('--rows must be a positive integer');
  if (args.relays !== undefined && !(Number.isSafeInteger(args.relays) && args.relays >= 1 && args.relays <= 8)) usage('--relays must be 1-8');
  return args;
}

function usage(problem: string): never {
  process.stderr.write(
    `faults: ${problem}\nusage: tsx test/faults/run.ts --profile smoke|ci|multi-ci|tenants-ci|pooler-ci|cluster-ci|eos-cluster-ci|cluster|long [--seed N] [--rows N] [--relays N] [--plant dedup-off|horizon-off|progress-off] [--verify-planted] [--no-snapshot] [--committed-src] [--code-dir DIR] [--producer kafkajs|platformatic]\n`,
  );
  process.exit(2);
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const runs = planRuns(args);

  // Everything we start is stopped on the way out, whatever the way.
  if (args.committedSrc && !args.snapshot) usage('--committed-src needs the snapshot');
  const version = readCodeVersion();
  const code = args.committedSrc ? { commit: version.commit, uncommitted: [] } : version;
  const codeDir = args.codeDir ?? (args.snapshot ? snapshotCode(ROOT, args.committedSrc) : ROOT);
  if (args.codeDir) log(`code under test: ${args.codeDir} as given (--code-dir); the report's commit is the working tree's`);
  const removeCode = (): void => {
    if (!args.codeDir) removeSnapshot(codeDir);
  };
  onEmergency(removeCode);
  onEmergency(killAllChildren);

  const reports: RunReport[] = [];
  let servers: Servers | undefined;
  try {
    // Every run of one command has the same profile, so the same brokers and pooler.
    const brokers = runs[0]?.profile.brokers ?? 1;
    const pooler = runs[0]?.profile.pooler;
    log(`starting a Postgres instance${pooler ? `, a PgBouncer in ${pooler} pooling in front of it` : ''} and ${brokers > 1 ? `a ${brokers}-node Kafka cluster` : 'a Kafka broker'} of our own`);
    servers = await startServers(brokers, pooler);
    const bouncer = servers.pgbouncer ? `, PgBouncer ${servers.pgbouncer.url('postgres')} (pid ${servers.pgbouncer.pid()}, ${servers.pgbouncer.dir})` : '';
    log(`Postgres ${servers.postgres.url} (${servers.postgres.dir})${bouncer}, Kafka ${servers.kafka.brokers}; code under test: ${codeDir}`);
    for (const cfg of runs) {
      try {
        const report = await (cfg.profile.tenants ? runTenantsOnce : runOnce)({ servers, codeDir, code }, cfg);
        reports.push(report);
        printReport(report);
        log(`results: ${saveReport(report)}`);
      } catch (error) {
        // The run did not complete; the self-check of the command counts it missing.
        log(`run ${cfg.name} did not complete: ${(error as Error)?.stack ?? String(error)}`);
        killAllChildren();
      }
    }
  } finally {
    killAllChildren();
    await stopServers(servers);
    removeCode();
  }

  let ok = true;
  process.stdout.write('=== summary ===\n');
  for (const r of reports) {
    const { pass, what } = judge(r, args.plant !== 'none');
    ok &&= pass;
    process.stdout.write(`  ${pass ? 'PASS' : 'FAIL'}  ${r.name}: ${what}  (${(r.wallMs / 1000).toFixed(0)} s)\n`);
  }
  const ran = runsCheck(
    runs,
    reports.map((r) => r.name),
    args.verifyPlanted,
  );
  for (const l of ran) {
    ok &&= l.ok;
    process.stdout.write(`  ${l.ok ? 'PASS' : 'FAIL'}  ${formatLine(l)}\n`);
  }
  process.stdout.write(`  seed ${args.seed}; reproduce: ${runs[0]?.command}\n  total wall time ${(elapsedMs() / 1000).toFixed(0)} s\n`);
  // CI's time table (scripts/ciTimeTable.ts) takes each command's time from here.
  const timesFile = process.env.OUTBOX_FAULTS_TIMES_FILE;
  if (timesFile) {
    const lane = process.env.OUTBOX_FAULTS_LANE ? Number(process.env.OUTBOX_FAULTS_LANE) : undefined;
    const line = { command: runs[0]?.command, ...(lane ? { lane } : {}), runs: reports.map((r) => ({ name: r.name, seconds: Math.round(r.wallMs / 1000) })), seconds: Math.round(elapsedMs() / 1000), ok };
    appendFileSync(timesFile, `${JSON.stringify(line)}\n`);
  }
  return ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`faults: ${(error as Error)?.stack ?? String(error)}\n`);
    process.exit(1);
  },
);
