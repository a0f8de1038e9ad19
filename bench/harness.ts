/**
 * Runs benchmark sections in order and checks itself: every section given must run and
 * return rows with figures in them (a section that throws, returns no rows, or a row whose
 * figure is not a number, or one whose prerequisite did not complete, is a problem). Then
 * the report (bench/report.ts). Used by bench/run.ts and by the standalone scripts.
 */
import pg from 'pg';
import { DATABASE_URL } from './common.js';
import { machine } from './machine.js';
import { writeReport, type Plot, type Row, type SectionResult } from './report.js';
import { currentCommit, SUMMARY_DIR, SUMMARY_FORMAT, writeSummary } from './summary.js';
import { log } from './util.js';
import { armHere, distinctArms, labelProblem, onConsumerStarted, onRelayStarted, type ArmFacts } from './armFacts.js';
import { takeArmsStarted } from './children.js';

export interface Section {
  name: string;
  /** Its heading in the log, e.g. "2. relay drain". */
  title: string;
  /** Sections that must have completed before this one (they come earlier in the list). */
  needs?: string[];
  run(pool: pg.Pool): Promise<SectionResult>;
}

/** Why a section's result does not count as a result, or undefined when it does. */
export function problemWith(r: SectionResult): string | undefined {
  if (r.rows.length === 0) return 'returned no rows';
  const empty = r.rows.filter((x) => x.value.includes('n/a'));
  if (empty.length > 0) return `no figure for ${empty.map((x) => `"${x.what}"`).join(', ')}`;
  const mislabelled = r.rows.map((x) => labelProblem(x.what, x.ran ?? [])).filter((p) => p !== undefined);
  if (mislabelled.length > 0) return `labelled other than it ran: ${mislabelled.join('; ')}`;
  return undefined;
}

/**
 * Rows without arms of their own get every arm that ran in their section: the relays
 * and consumers of child processes (bench/children.ts) and of this one (their
 * diagnostics channels), once each.
 */
export function stampArms(rows: Row[], arms: ArmFacts[]): void {
  const distinct = distinctArms(arms);
  if (distinct.length === 0) return;
  for (const r of rows) if (r.ran === undefined) r.ran = distinct;
}

/**
 * Runs `sections` in order, writes the report to `outDir` and prints its table headed by
 * `name`; with `summary`, also the run's committed summary (bench/summary.ts) into
 * `summary.dir`, failed sections included. Resolves with the exit code: 0 when every
 * section completed, 1 otherwise.
 */
export async function runSections(o: {
  name: string;
  outDir: string;
  sections: Section[];
  facts?: Record<string, unknown>;
  poolMax?: number;
  summary?: { dir: string; profile: string; sizes?: unknown };
}): Promise<number> {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: o.poolMax ?? 24 });
  try {
    log(`${o.name}: sections ${o.sections.map((s) => s.name).join(', ')}; results in ${o.outDir}`);
    const results: Record<string, unknown> = { ...o.facts, startedAt: new Date().toISOString(), selected: o.sections.map((s) => s.name) };
    // Read before the sections run: a tree edited during the run is not what was measured.
    const commit = currentCommit();
    const facts = await machine(pool);
    results.machine = facts;
    const rows: Row[] = [];
    const plots: Plot[] = [];
    const completed = new Set<string>();
    const problems = new Map<string, string>();
    for (const s of o.sections) {
      const missing = (s.needs ?? []).filter((n) => !completed.has(n));
      if (missing.length > 0) {
        problems.set(s.name, `not run: needs ${missing.join(', ')}, which did not complete`);
        continue;
      }
      log(s.title);
      takeArmsStarted();
      const inProcess: ArmFacts[] = [];
      const stopRelays = onRelayStarted((m) => inProcess.push(armHere('relay', m.producer, m.delivery)));
      const stopConsumers = onConsumerStarted((m) => inProcess.push(armHere('consumer', m.client)));
      try {
        const r = await s.run(pool).finally(() => {
          stopRelays();
          stopConsumers();
        });
        stampArms(r.rows, [...takeArmsStarted(), ...inProcess]);
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
    for (const s of o.sections) if (!completed.has(s.name) && !problems.has(s.name)) problems.set(s.name, 'did not run');
    results.sectionsCompleted = [...completed];
    results.sectionProblems = Object.fromEntries(problems);
    results.finishedAt = new Date().toISOString();
    const where = `${facts.cpus} cores, Postgres ${facts.postgres}, Kafka ${facts.kafkaBrokers.join(',')}`;
    writeReport({ outDir: o.outDir, title: `${o.name}, ${String(results.startedAt)} (${where})`, results, rows, plots });
    if (o.summary) {
      const path = writeSummary(o.summary.dir, {
        format: SUMMARY_FORMAT,
        name: o.name,
        profile: o.summary.profile,
        startedAt: String(results.startedAt),
        finishedAt: String(results.finishedAt),
        commit,
        sectionsSelected: o.sections.map((s) => s.name),
        sectionsCompleted: [...completed],
        sectionProblems: Object.fromEntries(problems),
        machine: facts,
        ...(o.summary.sizes !== undefined && { sizes: o.summary.sizes }),
        rows,
      });
      const committed = path.startsWith(SUMMARY_DIR);
      process.stdout.write(committed ? `Summary to commit: ${path}\nTables from it: npm run bench:tables -- --from ${path}\n` : `Summary: ${path}\n`);
    }
    if (problems.size === 0) return 0;
    process.stderr.write(`\nbench: ${problems.size} of ${o.sections.length} sections did not produce results:\n`);
    for (const [name, problem] of problems) process.stderr.write(`  ${name}: ${problem}\n`);
    return 1;
  } finally {
    await pool.end();
  }
}
