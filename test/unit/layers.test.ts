// Lower layers never import upper ones, so each folder can be read on its own:
//   shared  <  encodings  <  relay, consumer  <  tenants  <  metrics  <  commands  <  console  <  cli (cli.ts and src/cli/), index.ts
// The relay and the consumer do not know each other (nor the cache helper, src/cache/,
// nor the effect guard, src/effects/, which need only shared); the metrics observe them from the
// outside; the operator commands may use all of them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = resolve(fileURLToPath(new URL('../../src', import.meta.url)));

/** For each folder, the folders its modules may import (besides their own). */
const MAY_IMPORT: Record<string, string[]> = {
  shared: [],
  encodings: ['shared'],
  relay: ['shared', 'encodings'],
  consumer: ['shared', 'encodings'],
  cache: ['shared'],
  effects: ['shared'],
  tenants: ['shared', 'relay', 'encodings'],
  metrics: ['shared', 'relay', 'consumer', 'tenants', 'encodings'],
  commands: ['shared', 'relay', 'consumer', 'metrics', 'tenants', 'encodings'],
  console: ['shared', 'relay', 'consumer', 'metrics', 'commands', 'tenants', 'encodings'],
  cli: ['shared', 'relay', 'consumer', 'metrics', 'commands', 'console', 'tenants', 'encodings'],
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

/** The modules reachable from the package's entry points, each with the src/ modules it imports (type-only imports and re-exports included). */
function moduleGraph(entries: string[]): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const pending = [...entries];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (graph.has(file)) continue;
    const text = readFileSync(file, 'utf8');
    const targets: string[] = [];
    // Static imports and re-exports (`import ... from`, `import type`, `export ... from`),
    // bare `import '...'`, and dynamic `import('...')`.
    for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g)) {
      const target = resolve(dirname(file), m[1]!.replace(/\.js$/, '.ts'));
      assert.ok(existsSync(target), `${relative(SRC, file)} imports ${m[1]}, which is not a source file`);
      targets.push(target);
      pending.push(target);
    }
    graph.set(file, targets);
  }
  return graph;
}

/** Every import cycle of `graph`, each once, as the list of its modules. */
function cycles(graph: Map<string, string[]>): string[][] {
  const found = new Map<string, string[]>();
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string): void => {
    state.set(file, 'open');
    stack.push(file);
    for (const target of graph.get(file) ?? []) {
      if (state.get(target) === 'open') {
        const cycle = stack.slice(stack.indexOf(target)).map((f) => relative(SRC, f));
        const key = [...cycle].sort().join(' ');
        if (!found.has(key)) found.set(key, cycle);
      } else if (!state.has(target)) visit(target);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return [...found.values()];
}

test('no import cycle among the modules reachable from src/index.ts, src/cli.ts, src/cache/index.ts and src/effects/index.ts', () => {
  const graph = moduleGraph(['index.ts', 'cli.ts', 'cache/index.ts', 'effects/index.ts'].map((f) => join(SRC, f)));
  // The walk reached the whole tree (a broken pattern would see only the entry points).
  assert.ok(graph.has(join(SRC, 'relay/relay.ts')) && graph.has(join(SRC, 'consumer/consumer.ts')) && graph.has(join(SRC, 'metrics/backlogSampler.ts')) && graph.has(join(SRC, 'effects/reservation.ts')), `reached ${graph.size} modules`);
  assert.deepEqual(cycles(graph).map((c) => c.join(' -> ')), []);
});

test('the cycle finder finds a cycle through a type-only import', () => {
  const [x, y, z] = ['x.ts', 'y.ts', 'z.ts'].map((f) => join(SRC, f));
  assert.deepEqual(cycles(new Map([[x!, [y!]], [y!, [z!]], [z!, [x!]]])), [['x.ts', 'y.ts', 'z.ts']]);
  assert.deepEqual(cycles(new Map([[x!, [y!, z!]], [y!, [z!]], [z!, []]])), []);
});

/** The project's bound on a source file: past it, a module holds more than one concept. */
const MAX_SOURCE_LINES = 450;

test(`no source file of src/ is over ${MAX_SOURCE_LINES} lines`, () => {
  const files = sources(SRC);
  assert.ok(files.length > 100 && files.includes(join(SRC, 'relay/options.ts')), `walked ${files.length} files`);
  const over = files
    .map((f) => ({ file: relative(SRC, f), lines: readFileSync(f, 'utf8').split('\n').length - 1 }))
    .filter((f) => f.lines > MAX_SOURCE_LINES)
    .map((f) => `${f.file}: ${f.lines}`);
  assert.deepEqual(over, []);
});
