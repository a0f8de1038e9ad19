/**
 * The committed record of a benchmark run: its table rows (result, target, met, load), the
 * machine, the commit it ran on, the sections run and the profile, in a few KB of JSON
 * under bench/committed/. README.md and docs/benchmarks.md quote runs only through these
 * files (bench/tables.ts writes their tables from one), so every figure there traces to a
 * committed file. The bulky results.json and the plots stay in bench/results/ (ignored).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Machine } from './machine.js';
import type { Row } from './report.js';

/** Where `npm run bench` writes its summaries: bench/committed/ (committed). */
export const SUMMARY_DIR = fileURLToPath(new URL('./committed/', import.meta.url));

/** Bumped when the shape changes, so an old file is refused with a reason rather than misread. */
export const SUMMARY_FORMAT = 1;

export interface RunSummary {
  format: typeof SUMMARY_FORMAT;
  name: string;
  /** `quick` (small sizes, for trying things) or `full`. */
  profile: string;
  startedAt: string;
  finishedAt: string;
  /** The checked-out commit, and whether the tree differed from it (bench/committed/ aside). */
  commit: { hash: string; dirty: boolean } | null;
  sectionsSelected: string[];
  sectionsCompleted: string[];
  /** Section name → why it produced no result (empty when every section did). */
  sectionProblems: Record<string, string>;
  machine: Machine;
  sizes?: unknown;
  rows: Row[];
}

/** The commit of the working tree, or null outside a git checkout. */
export function currentCommit(): RunSummary['commit'] {
  const cwd = fileURLToPath(new URL('..', import.meta.url));
  try {
    const hash = execFileSync('git', ['rev-parse', 'HEAD'], { cwd, encoding: 'utf8' }).trim();
    // Untracked files count (a new section not yet added runs too), earlier summaries do not.
    const changed = execFileSync('git', ['status', '--porcelain'], { cwd, encoding: 'utf8' }).split('\n').filter((l) => l.trim() !== '' && !l.slice(3).startsWith('bench/committed/'));
    const dirty = changed.length > 0;
    return { hash, dirty };
  } catch {
    return null;
  }
}

/** `<startedAt with : and . as ->-<profile>.json`, e.g. 2026-12-01T20-31-02-117Z-quick.json. */
export function summaryFileName(s: Pick<RunSummary, 'startedAt' | 'profile'>): string {
  return `${s.startedAt.replace(/[:.]/g, '-')}-${s.profile}.json`;
}

/** Writes the summary into `dir` and returns the file's path. */
export function writeSummary(dir: string, s: RunSummary): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, summaryFileName(s));
  writeFileSync(path, `${JSON.stringify(s, null, 1)}\n`);
  return path;
}

/** Reads and checks a summary; the error names the file and what is wrong with it. */
export function readSummary(path: string): RunSummary {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new Error(code === 'ENOENT' ? `benchmark result ${path} does not exist` : `benchmark result ${path} is not readable JSON (${code ?? 'parse error'})`);
  }
  const s = parsed as Partial<RunSummary>;
  if (s.format !== SUMMARY_FORMAT) throw new Error(`benchmark result ${path}: format ${String(s.format)}, expected ${SUMMARY_FORMAT}`);
  for (const key of ['name', 'profile', 'startedAt', 'finishedAt'] as const) if (typeof s[key] !== 'string') throw new Error(`benchmark result ${path}: "${key}" is not a string`);
  if (!Array.isArray(s.rows) || s.rows.length === 0) throw new Error(`benchmark result ${path}: no rows`);
  for (const r of s.rows) {
    if (typeof r.section !== 'string' || typeof r.what !== 'string' || typeof r.value !== 'string' || typeof r.load1 !== 'number')
      throw new Error(`benchmark result ${path}: a row without section, what, value or load1`);
    if (r.target !== undefined && typeof r.met !== 'boolean') throw new Error(`benchmark result ${path}: row "${r.what}" has a target but no met`);
    if (r.ran !== undefined && (!Array.isArray(r.ran) || r.ran.some((a) => typeof a?.client !== 'string' || typeof a?.clientVersion !== 'string' || typeof a?.role !== 'string')))
      throw new Error(`benchmark result ${path}: row "${r.what}" has a "ran" that is not a list of arms (role, client, clientVersion)`);
  }
  if (!Array.isArray(s.sectionsSelected) || !Array.isArray(s.sectionsCompleted) || typeof s.sectionProblems !== 'object' || !s.machine)
    throw new Error(`benchmark result ${path}: sections or machine missing`);
  return s as RunSummary;
}
