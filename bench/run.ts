/**
 * The benchmark suite (issue 7): one command, real servers, one run, one table.
 *
 *   npm run bench                 # full profile (~15 minutes on the 2-core machine)
 *   npm run bench -- --quick      # small sizes, for trying things (~4 minutes)
 *   npm run bench -- --only consumer,peer
 *   npm run bench -- --quick --out /tmp/bench   # results elsewhere than bench/results/<stamp>/
 *
 * This file only reads the arguments and runs the selected sections in order; each section
 * is a module of bench/sections/ that returns its table rows (bench/report.ts prints them
 * and writes results.json and the plots). The run checks itself: every section the profile
 * and --only selected (with the sections it needs, drain needs ceilings) must have run and
 * returned rows with figures in them, or the run exits 1 naming the ones that did not.
 *
 * This machine is shared: every comparison is measured side by side in this run, arms
 * alternating where they repeat.
 */
import pg from 'pg';
import { buildChild } from './children.js';
import { DATABASE_URL, brokers } from './common.js';
import { machine } from './machine.js';
import { PROFILES } from './profile.js';
import { resultsDir, writeReport, type Plot, type Row, type SectionResult } from './report.js';
import { ceilings } from './sections/ceilings.js';
import { consumer } from './sections/consumer.js';
import { cost } from './sections/cost.js';
import { drain } from './sections/drain.js';
import { latency } from './sections/latency.js';
import { peer } from './sections/peer.js';
import { scale } from './sections/scale.js';
import { log } from './util.js';

const SECTIONS = ['ceilings', 'drain', 'latency', 'consumer', 'scale', 'peer', 'cost'] as const;
type SectionName = (typeof SECTIONS)[number];

function usage(problem: string): never {
  process.stderr.write(`bench: ${problem}\nusage: bench/run.ts [--quick] [--only ${SECTIONS.join(',')}] [--out DIR]\n`);
  process.exit(2);
}

function parseArgs(argv: string[]): { quick: boolean; only?: SectionName[]; outDir?: string } {
  const out: { quick: boolean; only?: SectionName[]; outDir?: string } = { quick: false };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.split(/=(.*)/s, 2) as [string, string | undefined];
    const value = (): string => inline ?? argv[++i] ?? usage(`${flag} needs a value`);
    if (flag === '--quick') out.quick = true;
    else if (flag === '--only') {
      const names = value().split(',').filter(Boolean);
      const unknown = names.filter((n) => !(SECTIONS as readonly string[]).includes(n));
      if (names.length === 0 || unknown.length > 0) usage(`--only: unknown section ${unknown.join(', ') || '(none given)'}`);
      out.only = names as SectionName[];
    } else if (flag === '--out') out.outDir = value();
    else usage(`unknown argument ${argv[i]}`);
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
const profile = args.quick ? 'quick' : 'full';
const P = PROFILES[profile];
const outDir = args.outDir ?? resultsDir(args.quick ? 'quick' : undefined);
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 24 });

/** Ceiling 1 (the raw producer's rows/s), for the drain section's ratios. */
let ceiling1 = NaN;

const sections: Array<{ name: SectionName; title: string; needs?: SectionName[]; run: () => Promise<SectionResult> }> = [
  {
    name: 'ceilings',
    title: '1. ceilings',
    run: async () => {
      const r = await ceilings(pool, { rows: P.drainRows });
      ceiling1 = r.data.kafkaProducer;
      return r;
    },
  },
  { name: 'drain', title: '2. relay drain', needs: ['ceilings'], run: () => drain(pool, { rows: P.drainRows, ceiling: ceiling1, compare: [{ batchSize: 1000 }] }) },
  {
    name: 'latency',
    title: '3. latency',
    // The relay alone first (as deployed with the consumer on another server), then with our
    // consumer on this same Postgres: its transactions hold the relay's horizon back.
    run: () => latency(pool, { seconds: P.latencySeconds, arms: [{ rate: 1_000, withConsumer: false }, { rate: 1_000, withConsumer: true }, { rate: 5_000, withConsumer: true }] }),
  },
  {
    name: 'consumer',
    title: '4. consumer',
    run: () =>
      consumer(pool, {
        messages: P.consumerMessages,
        partitions: 4,
        rounds: P.consumerRounds,
        arms: [
          { key: 'ours', label: 'consumer, dedup + one-row effect (defaults: 100/transaction, savepoints on failure)', savepoints: 'on-failure' },
          { key: 'savepoint per message (before)', label: 'before: a savepoint per message, 50/transaction', savepoints: 'always', messagesPerTransaction: 50 },
        ],
      }),
  },
  { name: 'scale', title: '5. scale', run: () => scale(pool, { rows: P.scaleRows, rounds: P.scaleRounds, backlogs: { small: P.smallBacklog, big: P.bigBacklog } }) },
  { name: 'peer', title: '6. peer', run: () => peer(pool, { rows: P.peerRows, seconds: P.peerSeconds }) },
  { name: 'cost', title: '7. cost to the application', run: () => cost(pool, { seconds: P.pgbenchSeconds, rounds: P.pgbenchRounds }) },
];

/** The selected sections and those they need, in the order they run. */
function selection(): Set<SectionName> {
  const selected = new Set<SectionName>(args.only ?? SECTIONS);
  for (const s of [...sections].reverse()) if (selected.has(s.name)) for (const n of s.needs ?? []) selected.add(n);
  return new Set(SECTIONS.filter((n) => selected.has(n)));
}

/** Why a section's result does not count as a result, or undefined when it does. */
function problemWith(r: SectionResult): string | undefined {
  if (r.rows.length === 0) return 'returned no rows';
  const empty = r.rows.filter((x) => x.value.includes('n/a'));
  if (empty.length > 0) return `no figure for ${empty.map((x) => `"${x.what}"`).join(', ')}`;
  return undefined;
}

async function main(): Promise<number> {
  const selected = selection();
  log(`profile ${profile}; sections ${[...selected].join(', ')}; results in ${outDir}`);
  buildChild();
  const results: Record<string, unknown> = { profile, sizes: P, startedAt: new Date().toISOString(), selected: [...selected] };
  const facts = await machine(pool);
  results.machine = facts;
  const rows: Row[] = [];
  const plots: Plot[] = [];
  const completed = new Set<SectionName>();
  const problems = new Map<SectionName, string>();
  for (const s of sections) {
    if (!selected.has(s.name)) continue;
    const missing = (s.needs ?? []).filter((n) => !completed.has(n));
    if (missing.length > 0) {
      problems.set(s.name, `not run: needs ${missing.join(', ')}, which did not complete`);
      continue;
    }
    log(s.title);
    try {
      const r = await s.run();
      rows.push(...r.rows);
      plots.push(...(r.plots ?? []));
      results[s.name] = r.data;
      const problem = problemWith(r);
      if (problem) problems.set(s.name, problem);
      else completed.add(s.name);
    } catch (error) {
      log(`${s.title} failed: ${(error as Error)?.stack ?? String(error)}`);
      problems.set(s.name, `failed: ${(error as Error)?.message ?? String(error)}`);
    }
  }
  // The self-check: every selected section ran and returned results.
  for (const name of selected) if (!completed.has(name) && !problems.has(name)) problems.set(name, 'did not run');
  results.sectionsCompleted = [...completed];
  results.sectionProblems = Object.fromEntries(problems);
  results.finishedAt = new Date().toISOString();
  writeReport({
    outDir,
    title: `outbox-relay benchmark, ${profile} profile, ${String(results.startedAt)} (${facts.cpus} cores, Postgres ${facts.postgres}, Kafka ${brokers().join(',')})`,
    results,
    rows,
    plots,
  });
  if (problems.size === 0) return 0;
  process.stderr.write(`\nbench: ${problems.size} of ${selected.size} selected sections did not produce results:\n`);
  for (const [name, problem] of problems) process.stderr.write(`  ${name}: ${problem}\n`);
  return 1;
}

try {
  process.exitCode = await main();
} finally {
  await pool.end();
}
