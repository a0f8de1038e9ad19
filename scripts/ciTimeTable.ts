/**
 * Where CI's time went: .ci/run's phases, each test file of both test passes and each
 * fault command, as one markdown table (docs/ci-times.md is a committed one).
 *
 *   tsx scripts/ciTimeTable.ts --phases F.tsv --tests F.json [--tests F.json] --faults F.jsonl
 *                              --out F.md [--commit SHA]
 *
 * Inputs are written during the run: .ci/run's `phase` lines, test/helpers/fileTimesReporter.mjs
 * and test/faults/run.ts (OUTBOX_FAULTS_TIMES_FILE). A missing input is named in the table,
 * not skipped in silence. The slowest 20 rows are also printed, where a CI log is read.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg, cpus } from 'node:os';
import { parseArgs } from 'node:util';

/** The CI budget the table is held to (issue 34; docs/ci-times.md). */
export const CI_LIMIT_SECONDS = 25 * 60;

export interface Phase {
  name: string;
  seconds: number;
  /** The share of the machine's CPU time that was busy during the phase (0-1), when .ci/run measured it. */
  busy?: number;
}
export interface FileTime {
  file: string;
  seconds: number | null;
  tests: number;
  failed: number;
}
export interface TestPass {
  wallSeconds: number;
  node: string;
  files: FileTime[];
}
export interface FaultCommand {
  command: string;
  /** The lane of test/faults/ci.ts that ran it (lanes run at once); absent when run alone. */
  lane?: number;
  runs: Array<{ name: string; seconds: number }>;
  seconds: number;
  ok: boolean;
}

export function parsePhases(text: string): Phase[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => {
      const [name, seconds, busyTicks, allTicks] = l.split('\t');
      const n = Number(seconds);
      if (!name || !Number.isFinite(n)) throw new Error(`ciTimeTable: bad phase line ${JSON.stringify(l)}`);
      if (busyTicks === undefined) return { name, seconds: n };
      // .ci/run's clock ticks of /proc/stat: busy, and all (busy and idle), over the phase.
      const busy = Number(busyTicks);
      const all = Number(allTicks);
      if (!Number.isInteger(busy) || !Number.isInteger(all) || busy < 0 || busy > all) throw new Error(`ciTimeTable: bad phase line ${JSON.stringify(l)}`);
      return all > 0 ? { name, seconds: n, busy: busy / all } : { name, seconds: n };
    });
}

export function parseFaults(text: string): FaultCommand[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as FaultCommand);
}

/** The markdown table: phases, then every test file slowest first, then the fault commands. */
export function renderTable(input: { phases: Phase[]; passes: Array<{ label: string; pass: TestPass | null }>; faults: FaultCommand[] | null; commit: string; date: string; machine: string }): string {
  const total = input.phases.reduce((s, p) => s + p.seconds, 0);
  const out: string[] = [];
  out.push('# Where CI\'s time goes');
  out.push('');
  out.push(`Written by \`scripts/ciTimeTable.ts\` at the end of \`.ci/run\` (CI=true), commit ${input.commit}, ${input.date}; ${input.machine}.`);
  out.push('');
  out.push(`Total: **${total} s** (${(total / 60).toFixed(1)} min) against a limit of ${CI_LIMIT_SECONDS / 60} min: ${total < CI_LIMIT_SECONDS ? 'under' : '**over**'}.`);
  out.push('');
  out.push('## Phases');
  out.push('');
  // CPU busy: of all cores' time during the phase, the share not idle (/proc/stat). Near
  // 100 % a phase is short of CPU, and running less is what shortens it; well below, it
  // waits on something else, and more at once would.
  out.push('| phase | seconds | share | CPU busy |');
  out.push('|---|---:|---:|---:|');
  for (const p of input.phases) {
    out.push(`| ${p.name} | ${p.seconds} | ${total > 0 ? Math.round((100 * p.seconds) / total) : 0} % | ${p.busy === undefined ? '' : `${Math.round(100 * p.busy)} %`} |`);
  }
  out.push('');
  out.push('CPU busy: of all the cores\' time during the phase, the share that was not idle (`/proc/stat`, read by `.ci/run` at each phase\'s start).');
  out.push('');
  out.push('## Test files, slowest first');
  out.push('');
  out.push('Files run side by side (`--test-concurrency` in package.json and scripts/relay-test-pass.sh): a pass\'s wall time is its files\' summed time divided by how many ran at once, on average.');
  out.push('');
  const rows: Array<{ label: string; f: FileTime }> = [];
  for (const { label, pass } of input.passes) {
    if (!pass) {
      out.push(`- ${label}: no timings were written (the pass did not run or did not finish).`);
      continue;
    }
    const sum = pass.files.reduce((s, f) => s + (f.seconds ?? 0), 0);
    const tests = pass.files.reduce((s, f) => s + f.tests, 0);
    // node:test names a test by the module that declared it: tests declared in a helper
    // (test/hostile/suite.ts) land there, not under the test file whose process ran them.
    const run = pass.files.filter((f) => f.seconds !== null);
    const declaredElsewhere = pass.files.filter((f) => f.seconds === null);
    const together = pass.wallSeconds > 0 ? ` (${(sum / pass.wallSeconds).toFixed(1)} at once on average)` : '';
    out.push(`- ${label} (${pass.node}): ${run.length} files, ${tests} tests, ${pass.wallSeconds} s wall, ${Math.round(sum)} s summed over files${together}.`);
    for (const f of declaredElsewhere) out.push(`  ${f.tests} of those tests were declared in ${f.file} and are counted there, not under the file that ran them.`);
    for (const f of run) rows.push({ label, f });
  }
  out.push('');
  rows.sort((a, b) => (b.f.seconds ?? 0) - (a.f.seconds ?? 0));
  out.push('| # | pass | file | seconds | tests | failed |');
  out.push('|---:|---|---|---:|---:|---:|');
  rows.forEach(({ label, f }, i) => out.push(`| ${i + 1} | ${label} | ${f.file} | ${f.seconds ?? 'n/a'} | ${f.tests} | ${f.failed} |`));
  out.push('');
  out.push('## Fault commands (`npm run test:faults`)');
  out.push('');
  if (!input.faults) out.push('No timings were written (test:faults did not run or did not finish).');
  else {
    const lanes = [...new Set(input.faults.map((c) => c.lane ?? 0))].sort((a, b) => a - b);
    if (lanes.length > 1 || lanes[0] !== 0) {
      const laneSeconds = lanes.map((l) => `lane ${l || '(none)'} ${input.faults!.filter((c) => (c.lane ?? 0) === l).reduce((s, c) => s + c.seconds, 0)} s`);
      out.push(`The lanes of test/faults/ci.ts run at the same time, each its commands one after the other, so the phase takes about its longest lane: ${laneSeconds.join(', ')}.`);
      out.push('');
    }
    out.push('| lane | command | runs (seconds each) | seconds | passed |');
    out.push('|---:|---|---|---:|---|');
    for (const c of input.faults) out.push(`| ${c.lane ?? ''} | \`${c.command}\` | ${c.runs.map((r) => `${r.name} ${r.seconds}`).join(', ')} | ${c.seconds} | ${c.ok ? 'yes' : 'no'} |`);
  }
  out.push('');
  return out.join('\n');
}

function readIf(path: string | undefined): string | null {
  return path && existsSync(path) ? readFileSync(path, 'utf8') : null;
}

function main(): void {
  const { values } = parseArgs({
    options: {
      phases: { type: 'string' },
      tests: { type: 'string', multiple: true },
      faults: { type: 'string' },
      out: { type: 'string' },
      commit: { type: 'string', default: 'unknown' },
    },
  });
  if (!values.phases || !values.out) throw new Error('usage: tsx scripts/ciTimeTable.ts --phases F.tsv --tests F.json ... --faults F.jsonl --out F.md [--commit SHA]');
  const phases = parsePhases(readIf(values.phases) ?? '');
  const labels = ['first pass', 'second pass'];
  const passes = (values.tests ?? []).map((path, i) => {
    const text = readIf(path);
    return { label: labels[i] ?? `pass ${i + 1}`, pass: text ? (JSON.parse(text) as TestPass) : null };
  });
  const faultsText = readIf(values.faults);
  const machine = `${cpus().length} cores, load average ${loadavg().map((l) => l.toFixed(1)).join(' / ')} at the end`;
  const table = renderTable({ phases, passes, faults: faultsText === null ? null : parseFaults(faultsText), commit: values.commit ?? 'unknown', date: new Date().toISOString(), machine });
  writeFileSync(values.out, table);
  // The head of the table, for the CI log.
  process.stdout.write(`${table.split('\n').slice(0, 60).join('\n')}\n`);
}

if (import.meta.url === `file://${process.argv[1]}`) main();
