import { test } from 'node:test';
import assert from 'node:assert/strict';
import { batchMarker, beginClaimInlineSql, beginClaimSql, bindLiterals, claimSql, type ClaimArguments } from '../../src/relay/sql/claim.js';
import { markAndCommitInlineSql, markAndCommitSql, markSentSql } from '../../src/relay/sql/markSent.js';
import { deadLetterSql } from '../../src/relay/sql/deadLetter.js';
import { terminateOwnerSql } from '../../src/relay/sql/leases.js';
import { preparedStatementsLost } from '../../src/relay/poolerProbe.js';

// Behind a transaction pooler the relay sends its statements' full text with the values
// written in (sql/claim.ts beginClaimInlineSql): nothing may be left of a parameter, and
// nothing but a parameter may be taken for one.

const S = '"s1"';
const ARGS: ClaimArguments = { watermark: 42, shards: [0, 2, 4], batchSize: 500, relayId: 'a1b2c3d4e5f6', incarnation: '2026-12-01 00:00:00+00', floor: 7, generation: '3' };

test('the relay statements written inline hold no $ but their parameters, and none is left after binding', () => {
  for (const sql of [claimSql(S), markSentSql(S, 'mark'), markSentSql(S, 'delete')]) {
    const withoutParameters = sql.replace(/\$\d+/g, '');
    assert.ok(!withoutParameters.includes('$'), `a $ that is not a parameter: ${sql}`);
  }
  const claim = beginClaimInlineSql(S, ARGS);
  assert.ok(!/\$\d/.test(claim), claim);
  assert.ok(!/\b(PREPARE|EXECUTE)\b/.test(claim), 'no prepared statement');
  assert.match(claim, /id <= \(42\)/);
  assert.match(claim, /shard = ANY\(\('\{0,2,4\}'::smallint\[\]\)::smallint\[\]\)/);
  assert.match(claim, /LIMIT \(500\)/);
  const mark = markAndCommitInlineSql(S, 'mark', [5, 6], ARGS.relayId);
  assert.ok(!/\$\d/.test(mark), mark);
  assert.ok(!/\b(PREPARE|EXECUTE)\b/.test(mark));
  assert.match(mark, /; COMMIT$/);
  assert.match(mark, /count\(\*\) = \(2\)/, 'the lease check counts the ids given');
});

test('bindLiterals refuses a parameter it has no value for', () => {
  assert.throws(() => bindLiterals('SELECT $1, $2', ['1']), /no value for parameter \$2/);
  assert.equal(bindLiterals('SELECT $1, $10', ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10']), 'SELECT (1), (10)');
});

test('every statement of a batch starts with the batch marker, and the takeover looks for exactly that marker', () => {
  const marker = batchMarker(ARGS.relayId);
  assert.equal(marker, '/* outbox-relay batch a1b2c3d4e5f6 */');
  for (const sql of [beginClaimSql(ARGS), beginClaimSql(ARGS, 'PREPARE x AS SELECT 1; '), beginClaimInlineSql(S, ARGS), markAndCommitSql([1], ARGS.relayId), markAndCommitInlineSql(S, 'delete', [1], ARGS.relayId)]) {
    assert.ok(sql.startsWith(`${marker} `), sql.slice(0, 80));
  }
  // The takeover's query builds the same text from the stale owner's id ($1).
  assert.ok(terminateOwnerSql.includes(`'/* outbox-relay batch ' || $1 || ' */'`));
  assert.ok(!deadLetterSql(S).includes('outbox-relay batch'), 'the batch adds the marker to the dead-letter move itself (batch.ts)');
});

test('a relay id that could close the comment is refused', () => {
  assert.throws(() => batchMarker('x */ DROP TABLE outbox; /*'), /not a relay id/);
  assert.throws(() => batchMarker(''), /not a relay id/);
});

test('prepared statements lost: missing (26000) or already there (42P05), nothing else', () => {
  assert.equal(preparedStatementsLost(Object.assign(new Error('prepared statement "x" does not exist'), { code: '26000' })), true);
  assert.equal(preparedStatementsLost(Object.assign(new Error('prepared statement "x" already exists'), { code: '42P05' })), true);
  assert.equal(preparedStatementsLost(Object.assign(new Error('permission denied'), { code: '42501' })), false);
  assert.equal(preparedStatementsLost(new Error('no code')), false);
  assert.equal(preparedStatementsLost(undefined), false);
});
