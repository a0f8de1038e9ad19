/**
 * One TypeScript entry point of this repository and what it imports of src/, bundled with
 * esbuild into one plain ESM file; the packages stay imports of node_modules. Node then
 * runs it without a TypeScript loader: the bench's relay and consumer children
 * (bench/children.ts) and the CLI the tests start (test/helpers/processes.ts).
 *
 * `outfile` must sit two directories under the repository (`.cache/<dir>/<name>.mjs`):
 * src/shared/schema.ts and src/commands/roles.ts find sql/ two levels up from themselves.
 */
import { execFileSync } from 'node:child_process';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * `root`: the repository whose entry, src/ and esbuild are used (default this one; the
 * fault suite bundles the checkout it tests, test/faults/cliBundle.ts). `entry` and a
 * relative `outfile` are taken from `root`.
 */
export function bundleForNode(entry: string, outfile: string, root: string = ROOT): void {
  const out = resolve(root, outfile);
  if (relative(root, out).split(/[\\/]/).length !== 3) throw new Error(`${out}: a bundle must sit two directories under ${root}, where sql/ is two levels up`);
  execFileSync(
    join(root, 'node_modules/.bin/esbuild'),
    [entry, '--bundle', '--platform=node', '--format=esm', '--target=node22', '--packages=external', '--log-level=warning', `--outfile=${out}`],
    { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] },
  );
}
