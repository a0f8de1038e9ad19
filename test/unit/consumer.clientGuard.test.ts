import { test } from 'node:test';
import assert from 'node:assert/strict';
import { transactionControlStatement } from '../../src/consumer/clientGuard.js';
import { HandlerTimeout, withinHandlerTimeout } from '../../src/consumer/handlerTimeout.js';

// The text check of the client handlers get (src/consumer/clientGuard.ts): which
// statements would end, begin or split the consumer's transaction. No servers needed.

test('transaction-control statements are found, whatever their case, spacing, comments and neighbours', () => {
  const cases: Array<[string, string]> = [
    ['COMMIT', 'COMMIT'],
    ['commit work', 'COMMIT'],
    ['  End  ', 'END'],
    ['ABORT TRANSACTION', 'ABORT'],
    ['BEGIN ISOLATION LEVEL SERIALIZABLE', 'BEGIN'],
    ['start transaction read only', 'START TRANSACTION'],
    ['COMMIT AND CHAIN', 'COMMIT AND CHAIN'],
    ['ROLLBACK AND NO CHAIN', 'ROLLBACK AND NO CHAIN'],
    ['commit and no chain', 'COMMIT AND NO CHAIN'],
    ['ROLLBACK', 'ROLLBACK'],
    ['rollback transaction', 'ROLLBACK'],
    ["PREPARE TRANSACTION 'gid-1'", 'PREPARE TRANSACTION'],
    ["COMMIT PREPARED 'gid-1'", 'COMMIT PREPARED'],
    ["ROLLBACK PREPARED 'gid-1'", 'ROLLBACK PREPARED'],
    ['SELECT 1; COMMIT', 'COMMIT'],
    ["SELECT ';'; ROLLBACK; SELECT 2", 'ROLLBACK'],
    ['/* outer /* inner */ still a comment */ COMMIT', 'COMMIT'],
    ['-- a line comment\nBEGIN', 'BEGIN'],
    ['SELECT 1;;  ;COMMIT;', 'COMMIT'],
    ['CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; END; COMMIT', 'COMMIT'],
  ];
  for (const [sql, expected] of cases) assert.equal(transactionControlStatement(sql)?.split(' (')[0], expected, sql);
});

test('the consumer\'s savepoints are reserved, quoted or not; the handler\'s own are allowed', () => {
  assert.match(transactionControlStatement('ROLLBACK TO SAVEPOINT outbox_relay_message') ?? '', /reserved|consumer's/);
  assert.match(transactionControlStatement('release Outbox_Relay_Message') ?? '', /consumer's/);
  assert.match(transactionControlStatement('SAVEPOINT "outbox_relay_x"') ?? '', /consumer's/);
  assert.match(transactionControlStatement('ROLLBACK WORK TO outbox_relay_message') ?? '', /consumer's/);
  for (const sql of ['SAVEPOINT mine', 'ROLLBACK TO SAVEPOINT mine', 'ROLLBACK TO mine', 'RELEASE SAVEPOINT mine', 'RELEASE mine', 'SAVEPOINT "Outbox_relay"']) {
    assert.equal(transactionControlStatement(sql), undefined, sql);
  }
});

test('words inside literals, identifiers, dollar quotes and comments are not statements', () => {
  const fine = [
    '',
    'SELECT 1',
    'SELECT 1;',
    "SELECT 'x; COMMIT'",
    "SELECT 'it''s; COMMIT'",
    "SELECT E'\\'; COMMIT; '",
    'SELECT "a;" FROM t AS "commit"',
    'SELECT $$; COMMIT$$',
    'SELECT $body$ ; ROLLBACK; $body$, $1::text',
    "DO $$ BEGIN PERFORM 1; COMMIT; END $$",
    'SELECT 1 -- ; COMMIT',
    'SELECT 1 /* ; COMMIT */',
    'PREPARE q(int) AS SELECT $1',
    'EXECUTE q(1)',
    'SELECT begin, "end", commit_id FROM t',
    'UPDATE t SET x = 1 WHERE id = $1 RETURNING x',
    'CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT 2; END',
    'SET TRANSACTION ISOLATION LEVEL REPEATABLE READ',
    'LOCK TABLE t IN SHARE MODE',
  ];
  for (const sql of fine) assert.equal(transactionControlStatement(sql), undefined, sql);
});

// What a handler call that never settles leaves behind (src/consumer/handlerTimeout.ts).

const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('handler timeout: a call that never settles is given up after handlerTimeoutMs with HandlerTimeout', async () => {
  await assert.rejects(withinHandlerTimeout(new Promise<never>(() => undefined), 20, '5', '7'), (e: unknown) => e instanceof HandlerTimeout && /offsets 5-7 still running after 20 ms/.test((e as Error).message));
});

test('handler timeout: its timer does not keep the process alive (a hard stop abandons the call; the process of a stopped consumer then exits at once, not handlerTimeoutMs later)', () => {
  const before = timers();
  // The consumer races this against its stop and, on a hard stop, stops awaiting it.
  void withinHandlerTimeout(new Promise<never>(() => undefined), 60_000, '0', '0').catch(() => undefined);
  assert.equal(timers(), before, 'no timer keeping the event loop alive');
});
