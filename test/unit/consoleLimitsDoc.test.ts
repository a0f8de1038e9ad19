import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BACKLOG_CAP, DEAD_LETTER_CAP, GROUPED_DEAD_LETTERS, MATCHING_CAP } from '../../src/console/data/index.js';

// docs/console.md's "Limits" gives the console's caps as figures: they must be the ones the
// data layer uses.
test('docs/console.md states the caps the console counts with', () => {
  const doc = readFileSync(new URL('../../docs/console.md', import.meta.url), 'utf8');
  const limits = doc.slice(doc.indexOf('## Limits'), doc.indexOf('\n## ', doc.indexOf('## Limits') + 1)).replace(/\s+/g, ' ');
  const n = (v: number): string => v.toLocaleString('en-US');
  assert.match(limits, new RegExp(`backlog up to ${n(BACKLOG_CAP)}, then Postgres' estimate`));
  assert.match(limits, new RegExp(`matches of a filter up to ${n(MATCHING_CAP)} \\(then "${n(MATCHING_CAP)}\\+"\\)`));
  assert.match(limits, new RegExp(`dead letters past ${n(DEAD_LETTER_CAP)} by Postgres' estimate`));
  assert.match(limits, new RegExp(`newest ${n(GROUPED_DEAD_LETTERS)} dead letters`));
});
