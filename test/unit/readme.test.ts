import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { RUN_SETTINGS } from '../../src/commands/run.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

test('the README settings table lists every setting of `outbox-relay run`, with its flag and variable', () => {
  const rows = readme.split('\n').filter((l) => l.startsWith('| '));
  for (const s of RUN_SETTINGS) {
    const row = rows.find((r) => r.includes(`\`${s.env}\``));
    assert.ok(row, `README has a row for ${s.env}`);
    if (s.flag) assert.ok(row.includes(`\`${s.flag}\``), `${s.env}'s row names ${s.flag}`);
    else assert.ok(row.startsWith('| —'), `${s.env} has no flag (a secret) and the README says so`);
  }
});

test('the README has exactly the two newcomer commands: the demo and npm test', () => {
  const block = /## Try it[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
  const commands = block.split('\n').filter((l) => l.trim() !== '').map((l) => l.replace(/\s+#.*$/, ''));
  assert.deepEqual(commands, ['npm ci && npm run demo', 'npm ci && npm test']);
});
