// Does a Node.js version satisfy package.json's `engines.node`? Plain JavaScript with no
// dependency, so that it runs on the old node it judges (before npm ci, before tsx).
// scripts/with-node.sh asks it whether the node on PATH will do.
//
//   node scripts/nodeVersion.mjs check [VERSION]   exit 0 if VERSION (default: this node) satisfies engines
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** [major, minor, patch] of 'v24.6.0' or '24.6.0'; a missing minor or patch reads as 0. */
export function parseVersion(text) {
  const m = /^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?$/.exec(String(text).trim());
  if (!m) throw new Error(`not a version: ${JSON.stringify(text)}`);
  return [Number(m[1]), Number(m[2] ?? 0), Number(m[3] ?? 0)];
}

function compare(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/** One comparator: ^X.Y.Z, >=X.Y.Z, >X.Y.Z, <X.Y.Z, <=X.Y.Z or an exact X.Y.Z. */
function matches(version, comparator) {
  const m = /^(\^|>=|<=|>|<|=)?\s*(v?\d+(?:\.\d+){0,2})$/.exec(comparator);
  // Anything richer (~, x-ranges, hyphen ranges) is refused rather than half-read: an
  // engines edit that uses it fails the unit test instead of letting a wrong node through.
  if (!m) throw new Error(`unsupported engines comparator: ${JSON.stringify(comparator)}`);
  const bound = parseVersion(m[2]);
  const c = compare(version, bound);
  switch (m[1]) {
    case '^': return c >= 0 && version[0] === bound[0];
    case '>=': return c >= 0;
    case '>': return c > 0;
    case '<': return c < 0;
    case '<=': return c <= 0;
    default: return c === 0;
  }
}

/** Whether `version` satisfies a range of `||`-separated sets of space-separated comparators. */
export function satisfies(version, range) {
  const v = Array.isArray(version) ? version : parseVersion(version);
  return range.split('||').some((set) => {
    const comparators = set.trim().split(/\s+/).filter(Boolean);
    if (comparators.length === 0) throw new Error(`empty set in range ${JSON.stringify(range)}`);
    return comparators.map((c) => matches(v, c)).every(Boolean);
  });
}

export function enginesRange(packageJsonPath) {
  const range = JSON.parse(readFileSync(packageJsonPath, 'utf8')).engines?.node;
  if (typeof range !== 'string') throw new Error(`${packageJsonPath} has no engines.node`);
  return range;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [command, version = process.version] = process.argv.slice(2);
  if (command !== 'check') {
    console.error('usage: node scripts/nodeVersion.mjs check [VERSION]');
    process.exit(2);
  }
  const range = enginesRange(fileURLToPath(new URL('../package.json', import.meta.url)));
  if (satisfies(version, range)) process.exit(0);
  console.error(`node ${version} does not satisfy engines ${range}`);
  process.exit(1);
}
