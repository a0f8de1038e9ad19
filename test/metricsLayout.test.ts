// The metrics observe the relay and the consumer from the outside: no module of theirs,
// nor of src/shared/, imports src/metrics/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = resolve(fileURLToPath(new URL('../src', import.meta.url)));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

test('src/relay, src/consumer and src/shared never import src/metrics', () => {
  const files = ['relay', 'consumer', 'shared'].flatMap((dir) => sources(join(SRC, dir)));
  assert.ok(files.length > 10, 'found the sources');
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\b(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)) {
      const target = resolve(join(file, '..'), m[1] as string);
      const inSrc = relative(SRC, target);
      assert.ok(inSrc !== 'metrics' && !inSrc.startsWith('metrics/'), `${relative(SRC, file)} imports ${m[1]}`);
    }
  }
});
