import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

// README's "Try it" lists what a machine needs for the demo, the tests, .ci/run and the
// scripts they call. This holds the list to the code: every program a test, script or
// benchmark starts by name, and every command a shell script of the repository runs, must
// be named there (in backticks), so a new one cannot slip in unlisted.
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function filesUnder(dir: string, keep: (f: string) => boolean): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .map((f) => join(dir, f))
    .filter((f) => statSync(join(ROOT, f)).isFile() && keep(f));
}

/** Programs started by name from TypeScript: spawn('x', [...]), execFile('x', [...]), run('x', [...]) where run wraps execFile. */
export function programsOfSource(text: string): string[] {
  return [...text.matchAll(/(?:\bspawn|\bspawnSync|\bexecFile|\bexecFileSync|\bexecSync|\bexec|\brun|\)|execFileAsync)\(\s*'([a-z][\w.+-]*)',\s*\[/g)].map((m) => m[1]!);
}

const SHELL_WORDS = new Set(
  'if then else elif fi for in do done while until case esac set exit echo local return export trap cd read printf shift test [ [[ source . mapfile true false wait command unset eval exec break continue declare readonly pwd'.split(' '),
);

/** GNU coreutils' programs: README names the package, not each of them. */
const COREUTILS = new Set('basename cat comm cut date dirname head ls mkdir mktemp mv realpath rm seq sha256sum sleep sort tail tee'.split(' '));

/** Functions a shell text defines (`name() {`). */
function functionsOf(text: string): Set<string> {
  return new Set([...text.matchAll(/^\s*([\w-]+)\s*\(\)\s*\{/gm)].map((m) => m[1]!));
}

/**
 * Commands a shell script runs: the first word of each simple command, less builtins,
 * functions (its own and `known`'s: scripts source each other) and variable assignments.
 * Quoted text is dropped first, unless it holds a command substitution.
 */
export function programsOfShell(text: string, known: Set<string> = new Set()): string[] {
  const functions = new Set([...functionsOf(text), ...known]);
  const found: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw
      .replace(/(^|\s)#.*$/, '')
      .replace(/'[^']*'/g, "''")
      .replace(/"[^"]*"/g, (q) => (q.includes('$(') ? q : '""'));
    // Starts of commands: the line, after ; && || | then/do/else, inside $( ).
    for (const part of line.split(/;|&&|\|\||\||\$\(|\bthen\b|\bdo\b|\belse\b|`/)) {
      const words = part.trim().replace(/^[!({]\s*/, '').split(/\s+/);
      let i = 0;
      while (i < words.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[i]!)) i++; // VAR=value prefixes
      const word = words[i]?.replace(/\)+$/, '');
      if (!word || !/^[a-z][\w.+-]*$/.test(word) || SHELL_WORDS.has(word) || functions.has(word)) continue;
      found.push(word);
    }
  }
  return found;
}

test("every program the tests, scripts, benchmarks and CI start is named in README's Try it", () => {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const tryIt = /\n## Try it\n([\s\S]*?)\n## /.exec(readme)?.[1];
  assert.ok(tryIt, 'README has a "## Try it" section');
  const listed = new Set([...tryIt.matchAll(/`([^`\s]+)`/g)].map((m) => m[1]!));
  const sources = [...filesUnder('test', (f) => /\.(ts|mjs)$/.test(f)), ...filesUnder('scripts', (f) => f.endsWith('.ts')), ...filesUnder('bench', (f) => f.endsWith('.ts'))];
  const shells = [...filesUnder('scripts', (f) => f.endsWith('.sh')), '.ci/run'];
  const used = new Map<string, string>();
  // Not this file: its positive control names programs on purpose.
  for (const f of sources.filter((x) => x !== 'test/unit/prerequisites.test.ts')) for (const p of programsOfSource(readFileSync(join(ROOT, f), 'utf8'))) used.set(p, used.get(p) ?? relative(ROOT, join(ROOT, f)));
  const shellFunctions = new Set(shells.flatMap((f) => [...functionsOf(readFileSync(join(ROOT, f), 'utf8'))]));
  for (const f of shells) for (const p of programsOfShell(readFileSync(join(ROOT, f), 'utf8'), shellFunctions)) used.set(p, used.get(p) ?? f);
  assert.ok(tryIt.includes('coreutils'), "README's Try it names GNU coreutils");
  // The precondition: the scan finds what we know is there.
  for (const known of ['npm', 'java', 'javac', 'openssl', 'script', 'git', 'mvn', 'psql', 'apt-get']) assert.ok(used.has(known), `the scan finds ${known}`);
  const missing = [...used].filter(([p]) => !listed.has(p) && !COREUTILS.has(p)).map(([p, f]) => `${p} (${f})`);
  assert.deepEqual(missing, [], "programs started but not named in README's Try it");
});

test('the scan finds programs in both forms, and skips builtins, functions and variables (positive control)', () => {
  assert.deepEqual(programsOfSource("execFileSync('openssl', ['req']); spawn('script', ['-q']); promisify(execFile)('java', ['-cp']); run('npm', ['pack']); log('failed', x)"), ['openssl', 'script', 'java', 'npm']);
  const shell = 'say() { echo "$*"; }\nset -e\nif ! command -v mvn >/dev/null; then say "no; curl here"; fi\nwant=$(sha256sum "$f" | cut -d" " -f1)\nFOO=1 mvn -q # comment: curl\napt_install x\necho "a $(date) b"\n';
  assert.deepEqual(programsOfShell(shell, new Set(['apt_install'])), ['sha256sum', 'cut', 'mvn', 'date']);
});
