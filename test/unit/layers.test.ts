// Lower layers never import upper ones, so each folder can be read on its own:
//   shared  <  relay, consumer  <  metrics  <  commands  <  cli (cli.ts and src/cli/), index.ts
// The relay and the consumer do not know each other (nor the cache helper, src/cache/,
// which needs only shared); the metrics observe them from the
// outside; the operator commands may use all of them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = resolve(fileURLToPath(new URL('../../src', import.meta.url)));

/** For each folder, the folders its modules may import (besides their own). */
const MAY_IMPORT: Record<string, string[]> = {
  shared: [],
  relay: ['shared'],
  consumer: ['shared'],
  cache: ['shared'],
  metrics: ['shared', 'relay', 'consumer'],
  commands: ['shared', 'relay', 'consumer', 'metrics'],
  cli: ['shared', 'relay', 'consumer', 'metrics', 'commands'],
};

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

function folderOf(path: string): string {
  const inSrc = relative(SRC, path);
  return inSrc.includes('/') ? inSrc.split('/')[0]! : '(top)';
}

test('every folder of src/ imports only the layers below it', () => {
  const seen = new Set<string>();
  const wrong: string[] = [];
  for (const [folder, allowed] of Object.entries(MAY_IMPORT)) {
    const files = sources(join(SRC, folder));
    assert.ok(files.length > 0, `src/${folder} has sources`);
    for (const file of files) {
      for (const m of readFileSync(file, 'utf8').matchAll(/\b(?:from|import)\s*\(?\s*['"](\.[^'"]+)['"]/g)) {
        const target = folderOf(resolve(join(file, '..'), m[1]!));
        seen.add(folder);
        if (target !== folder && !allowed.includes(target)) wrong.push(`${relative(SRC, file)} imports ${m[1]} (${target})`);
      }
    }
  }
  assert.deepEqual(wrong, []);
  assert.deepEqual([...seen].sort(), Object.keys(MAY_IMPORT).sort(), 'each folder was checked');
});
