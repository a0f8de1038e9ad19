/**
 * The relay CLI and the consumer program of the code under test, each bundled once per
 * fault run process (scripts/bundle.ts): relays and consumers start as `node <bundle>`,
 * not through tsx: a relay start cost 1.1-1.3 CPU-seconds through tsx here, 0.4 from a
 * bundle, and the suite starts one at every kill.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { bundleForNode } from '../../scripts/bundle.js';

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
  if (!existsSync(join(codeDir, dir))) {
    mkdirSync(join(codeDir, dir), { recursive: true });
    process.on('exit', () => rmSync(join(codeDir, dir), { recursive: true, force: true }));
  }
  const relative = join(dir, name);
  bundleForNode(entry, relative, codeDir);
  bundles.set(key, relative);
  return relative;
}
