/**
 * The relay CLI and the consumer program of the code under test, each bundled once per
 * fault run process (esbuild, as scripts/bundle.ts does for the tests): relays and
 * consumers start as `node <bundle>`, not through tsx: a relay start cost 1.1-1.3
 * CPU-seconds through tsx here, 0.4 from a bundle, and the suite starts one at every kill. A bundle sits two directories under the code's root, where
 * src/shared/schema.ts finds sql/ two levels up.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const bundles = new Map<string, string>();

/** `src/cli.ts` of `codeDir` as one ESM file; its path relative to `codeDir`. */
export function relayCliBundle(codeDir: string): string {
  return bundle(codeDir, 'src/cli.ts', 'cli.mjs');
}

/** `test/faults/consumerProcess.ts` of `codeDir` as one ESM file; its path relative to `codeDir`. */
export function consumerBundle(codeDir: string): string {
  return bundle(codeDir, 'test/faults/consumerProcess.ts', 'consumer.mjs');
}

function bundle(codeDir: string, entry: string, name: string): string {
  const key = `${codeDir}\u0000${entry}`;
  const known = bundles.get(key);
  if (known) return known;
  const dir = join('.cache', `fault-bundles-${process.pid}`);
  mkdirSync(join(codeDir, dir), { recursive: true });
  const relative = join(dir, name);
  execFileSync(
    join(codeDir, 'node_modules/.bin/esbuild'),
    [entry, '--bundle', '--platform=node', '--format=esm', '--target=node22', '--packages=external', '--log-level=warning', `--outfile=${relative}`],
    { cwd: codeDir, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  bundles.set(key, relative);
  return relative;
}
