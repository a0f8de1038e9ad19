/**
 * Rewrites the benchmark tables of README.md, docs/benchmarks.md and docs/console.md
 * (bench/tables.ts, TABLE_FILES) from the committed summary each names, or, with
 * `--from`, from that one summary, which every table then names:
 *
 *   npm run bench:tables
 *   npm run bench:tables -- --from bench/committed/2026-12-01T20-31-02-117Z-full.json
 *   npm run bench:tables -- --from bench/committed/<file>.json --kinds retention,pooler
 *   npm run bench:tables -- --from bench/committed/<file>.json --kinds console   # docs/console.md
 *
 * With `--kinds`, only the tables of those kinds take the `--from` summary (a run of some
 * sections alone feeds their pages; the other tables keep the summaries they name).
 * Paths are relative to the repository root.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { isAbsolute, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readSummary } from './summary.js';
import { KINDS, regenerate, TABLE_FILES, type Kind } from './tables.js';

const root = fileURLToPath(new URL('..', import.meta.url));

function usage(problem: string): never {
  process.stderr.write(`bench:tables: ${problem}\nusage: bench/writeTables.ts [--from bench/committed/<file>.json [--kinds ${KINDS.join(',')}]]\n`);
  process.exit(2);
}

const argv = process.argv.slice(2);
let from: string | undefined;
let kinds: Kind[] | undefined;
for (let i = 0; i < argv.length; i++) {
  const [flag, inline] = argv[i]!.split(/=(.*)/s, 2) as [string, string | undefined];
  if (flag === '--from') from = inline ?? argv[++i] ?? usage('--from needs a file');
  else if (flag === '--kinds') {
    const names = (inline ?? argv[++i] ?? usage('--kinds needs a list')).split(',').filter(Boolean);
    const unknown = names.filter((n) => !(KINDS as readonly string[]).includes(n));
    if (names.length === 0 || unknown.length > 0) usage(`--kinds: unknown kind ${unknown.join(', ') || '(none given)'}`);
    kinds = names as Kind[];
  } else usage(`unknown argument ${argv[i]}`);
}
if (kinds !== undefined && from === undefined) usage('--kinds needs --from');
// Markers hold the path from the root, whichever directory the command ran in.
if (from !== undefined) {
  from = relative(root, isAbsolute(from) ? from : resolve(process.cwd(), from));
  // A table must name a file every clone has.
  if (!/^bench\/committed\/[^/]+\.json$/.test(from)) usage(`--from ${from}: not a summary in bench/committed/ (the tables may quote only committed runs)`);
}

try {
  // Every file rendered before any is written: a problem in one leaves both as they were.
  const files = TABLE_FILES.map((file) => {
    const path = resolve(root, file);
    const before = readFileSync(path, 'utf8');
    return { file, path, before, after: regenerate(before, file, (source) => readSummary(resolve(root, source)), from, kinds) };
  });
  for (const f of files) {
    if (f.after !== f.before) writeFileSync(f.path, f.after);
    process.stdout.write(`${f.file}: ${f.after === f.before ? 'unchanged' : 'rewritten'}\n`);
  }
} catch (error) {
  process.stderr.write(`bench:tables: ${(error as Error).message}\n`);
  process.exitCode = 1;
}
