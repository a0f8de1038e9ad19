/**
 * The code under test. Relays and consumers run from a copy of the tree taken at start
 * (others edit the shared working tree meanwhile, and a half-made edit must not reach a
 * run half-way), and every report records which code that was: the commit, and the
 * src/ and sql/ files changed since it, at any depth.
 */
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The working tree this suite belongs to. */
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** What the snapshot holds (everything a relay, a consumer and the migration need). */
const SNAPSHOT_ENTRIES = ['src', 'sql', 'scripts', 'test', 'package.json', 'tsconfig.json'];

/** Copy the code under test to /tmp so that edits made during a run do not reach it.
 *  With `committedSrc`, src/ and sql/ come from the commit (HEAD), not the working tree:
 *  a run that must not pick up others' half-made edits. */
export function snapshotCode(root = ROOT, committedSrc = false): string {
  const dir = mkdtempSync('/tmp/outbox-faults-code-');
  for (const entry of SNAPSHOT_ENTRIES) {
    if (committedSrc && (entry === 'src' || entry === 'sql')) {
      execFileSync('sh', ['-c', `git archive HEAD ${entry} | tar -x -C "$0"`, dir], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
    } else cpSync(join(root, entry), join(dir, entry), { recursive: true });
  }
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

export function removeSnapshot(dir: string): void {
  if (dir !== ROOT) rmSync(dir, { recursive: true, force: true });
}

export interface CodeVersion {
  commit: string;
  /** `XY path` per changed file (git's status letters), renames as `R  old -> new`. */
  uncommitted: string[];
}

/** The commit and the src/ and sql/ files changed since it (staged, unstaged, untracked). */
export function readCodeVersion(root = ROOT): CodeVersion {
  try {
    const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    // -uall: every untracked file, not just its new folder (src/relay/ as one line).
    const status = execFileSync('git', ['status', '--porcelain=v1', '-z', '--untracked-files=all', '--', 'src', 'sql'], { cwd: root, encoding: 'utf8' });
    return { commit, uncommitted: parseChangedFiles(status) };
  } catch {
    return { commit: 'unknown', uncommitted: [] };
  }
}

/** Parse `git status --porcelain=v1 -z`: `XY path\0`, and for a rename or copy
 *  `XY new\0old\0`. Paths come verbatim (no quoting in -z mode). */
export function parseChangedFiles(porcelainZ: string): string[] {
  const fields = porcelainZ.split('\0');
  const files: string[] = [];
  for (let i = 0; i < fields.length; i++) {
    const entry = fields[i] as string;
    if (entry.length < 4) continue;
    const xy = entry.slice(0, 2);
    const path = entry.slice(3);
    if (xy.includes('R') || xy.includes('C')) {
      const from = fields[++i] ?? '?';
      files.push(`${xy} ${from} -> ${path}`);
    } else {
      files.push(`${xy} ${path}`);
    }
  }
  return files;
}

/** Migrate `schema` with the CLI of the code under test; with `notifyOnInsert`, its insert trigger too. */
export function migrateSchema(codeDir: string, url: string, schema: string, notifyOnInsert = false): void {
  const [args, options] = migrateCommand(codeDir, url, schema, notifyOnInsert);
  execFileSync(process.execPath, args, options);
}

/** The same without blocking the harness: mid-run (a tenant added), its writers and samplers go on meanwhile. */
export function migrateSchemaAsync(codeDir: string, url: string, schema: string, notifyOnInsert = false): Promise<void> {
  const [args, options] = migrateCommand(codeDir, url, schema, notifyOnInsert);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, options);
    child.once('error', reject);
    child.once('exit', (code, signal) => (code === 0 ? resolve() : reject(new Error(`migrate of ${schema} exited ${code ?? signal}`))));
  });
}

function migrateCommand(codeDir: string, url: string, schema: string, notifyOnInsert: boolean): [string[], { cwd: string; env: NodeJS.ProcessEnv; stdio: ['ignore', 'ignore', 'inherit'] }] {
  return [
    ['--import', 'tsx', 'src/cli.ts', 'migrate', ...(notifyOnInsert ? ['--notify-on-insert'] : [])],
    {
      cwd: codeDir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: url, OUTBOX_SCHEMA: schema, OUTBOX_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  ];
}
