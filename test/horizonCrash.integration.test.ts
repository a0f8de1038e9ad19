import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnTs } from './helpers/processes.js';

// Crash recovery can rewind the outbox sequence below ids the horizon already released
// (nextval WAL-logs 32 values ahead; an unflushed record is lost). The reproduction runs a
// Postgres of its own, crashes it (immediate stop) after a rolled-back transaction took
// ids past the logged value, and checks whether the relay's horizon would then let a
// key's later id be claimed while an earlier one's transaction is open. A long
// wal_writer_delay keeps the WAL unflushed until the crash, so the window is certain.
test('integration: after a Postgres crash that rewinds the sequence, the horizon does not release reused ids early', async () => {
  const run = spawnTs('test/faults/reproHorizonCrash.ts', ['--wal-writer-delay-ms', '10000'], {});
  const code = await run.exited;
  assert.match(run.output(), /after the crash: sequence last value = \d+/, run.output());
  assert.equal(code, 0, run.output());
  assert.match(run.output(), /not reproduced/);
});
