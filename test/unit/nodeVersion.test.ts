import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { enginesRange, parseVersion, satisfies } from '../../scripts/nodeVersion.mjs';

// scripts/with-node.sh runs README's commands on the node on PATH only if this says engines
// accept it, and fetches Node 24 otherwise: a wrong answer either runs the tests on a node
// the dependencies refuse or fetches one for nothing.
const ENGINES = enginesRange(fileURLToPath(new URL('../../package.json', import.meta.url)));

test('versions parse with or without the v, pre-release and build tags aside', () => {
  assert.deepEqual(parseVersion('v24.6.0'), [24, 6, 0]);
  assert.deepEqual(parseVersion('22.22.1'), [22, 22, 1]);
  assert.deepEqual(parseVersion('v25.0.0-nightly2026'), [25, 0, 0]);
  assert.deepEqual(parseVersion('22'), [22, 0, 0]);
  assert.throws(() => parseVersion('lts/jod'), /not a version/);
});

test("package.json's engines: the machine's Node 20 and an early 22 or 24 are refused, so README's commands fetch Node 24", () => {
  for (const v of ['v20.20.2', 'v20.19.0', 'v22.12.0', 'v22.21.9', 'v24.5.0', 'v18.20.0', 'v23.11.0']) assert.equal(satisfies(v, ENGINES), false, v);
});

test("package.json's engines: 22 from 22.22 and 24 from 24.6 run where they are, and the Node 24 fetched is accepted", () => {
  for (const v of ['v22.22.0', 'v22.23.5', 'v24.6.0', 'v24.22.3', process.version]) assert.equal(satisfies(v, ENGINES), true, v);
  assert.equal(satisfies('v25.0.0', ENGINES), false, 'an untested major is not assumed to work');
});

test('range syntax: caret, comparisons, conjunctions; anything richer is refused, not guessed', () => {
  assert.equal(satisfies('1.2.3', '>=1.2.0 <2'), true);
  assert.equal(satisfies('2.0.0', '>=1.2.0 <2'), false);
  assert.equal(satisfies('1.2.3', '1.2.3'), true);
  assert.equal(satisfies('1.2.4', '>1.2.3 <=1.2.4'), true);
  assert.equal(satisfies('0.9.0', '^1.0.0 || ^0.9.0'), true);
  assert.throws(() => satisfies('1.2.3', '~1.2.0'), /unsupported/);
  assert.throws(() => satisfies('1.2.3', '1.x'), /unsupported/);
});
