import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseVersion } from '../../scripts/nodeVersion.mjs';

// docs/dependencies.md says why each entry of package.json is there; this keeps the page
// and the manifest from drifting apart as dependencies are added, dropped or moved.
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  engines: { node: string };
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
};
const page = readFileSync(join(ROOT, 'docs/dependencies.md'), 'utf8');

/** Table rows `| \`a\`, \`b\` | range | why | replacement |`: each package with its range. */
function documented(): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of page.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    if (cells.length < 5 || !cells[1]!.startsWith('`')) continue;
    const range = cells[2]!.replace(/\s*\(exact\)$/, '');
    for (const m of cells[1]!.matchAll(/`([^`]+)`/g)) rows.set(m[1]!, range);
  }
  return rows;
}

test('docs/dependencies.md has a row for every dependency and dev dependency, with its range, and none more', () => {
  const rows = documented();
  const manifest = new Map(Object.entries({ ...pkg.dependencies, ...pkg.devDependencies }));
  // A dev dependency that is also a peer is one entry in the manifest's sense: both in the table once.
  assert.ok(manifest.size >= 15, 'the manifest was read');
  for (const [name, range] of manifest) assert.equal(rows.get(name), range, `${name}: its row's range is package.json's`);
  assert.deepEqual([...rows.keys()].filter((name) => !manifest.has(name)), [], 'rows for packages package.json does not have');
});

test('docs/dependencies.md names each optional peer with its range', () => {
  for (const [name, range] of Object.entries(pkg.peerDependencies)) assert.ok(page.includes(`\`${name}\` \`${range}\``), `${name} ${range}`);
});

test("@types/node is the lowest major engines admits, and the page states engines as package.json has them", () => {
  const lowest = Math.min(...pkg.engines.node.split('||').map((set) => parseVersion(set.trim().replace(/^[\^>=<~]+/, ''))[0]));
  assert.equal(parseVersion(pkg.devDependencies['@types/node']!.replace(/^[\^~]/, ''))[0], lowest);
  assert.ok(page.includes(`\`engines\`: \`${pkg.engines.node}\``), 'the page quotes engines');
});

test("the tsc that npm scripts run is the `typescript` entry's, not the 5.9 kept for its API (both ship a tsc)", () => {
  const tsc = realpathSync(join(ROOT, 'node_modules/.bin/tsc'));
  assert.match(tsc, /node_modules\/typescript\/bin\/tsc$/);
  const installed = JSON.parse(readFileSync(join(ROOT, 'node_modules/typescript/package.json'), 'utf8')) as { version: string };
  assert.equal(parseVersion(installed.version)[0], parseVersion(pkg.devDependencies.typescript!.replace(/^[\^~]/, ''))[0]);
});
