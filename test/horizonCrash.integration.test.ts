import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnTs } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';

// Crash recovery can rewind the outbox sequence below ids the horizon already released
// (nextval WAL-logs 32 values ahead; an unflushed record is lost). The reproduction runs a
// Postgres of its own, crashes it (immediate stop) after a rolled-back transaction took
// ids past the logged value, and checks whether the relay's horizon would then let a
// key's later id be claimed while an earlier one's transaction is open. A long
// wal_writer_delay keeps the WAL unflushed until the crash, so the window is certain.
test('integration: after a Postgres crash that rewinds the sequence, the horizon does not release reused ids early', async () => {
  const run = spawnTs('test/faults/reproHorizonCrash.ts', ['--wal-writer-delay-ms', '10000'], {});
  const code = await run.exited;
  const number = (re: RegExp): number => {
    const m = re.exec(run.output());
    assert.ok(m, `${re} in\n${run.output()}`);
    return Number(m[1]);
  };
  // The situation, or "not reproduced" proves nothing: the crash rewound the sequence, so
  // writer A's id below is one the sequence had handed out before the crash.
  const before = number(/before the crash: sequence last value = (\d+)/);
  const after = number(/after the crash: sequence last value = (\d+)/);
  assert.ok(after < before, `the crash rewound the sequence: ${before} before, ${after} after\n${run.output()}`);
  const idA = number(/A holds id (\d+)/);
  assert.ok(idA <= before, `A's id ${idA} was handed out before the crash too (up to ${before})`);
  assert.equal(code, 0, run.output());
  assert.match(run.output(), /not reproduced/);
});

test('integration: ids the horizon released stay taken after a crash: a pair is released only once the WAL is flushed past it', async () => {
  const { startLocalPostgres } = await import('../scripts/localPostgres.js');
  const { migrate } = await import('../src/commands/migrate.js');
  const { Horizon, openProbeConnection } = await import('../src/relay/horizon.js');
  const pg = (await import('pg')).default;
  // A long wal_writer_delay: nothing flushes the WAL in the background before the crash.
  const server = await startLocalPostgres({ settings: { wal_writer_delay: '10000ms' } });
  try {
    await migrate({ databaseUrl: server.url, schema: 's' });
    const app = new pg.Client({ connectionString: server.url });
    app.on('error', () => undefined);
    await app.connect();
    await app.query(`INSERT INTO s.outbox (topic, key) VALUES ('t', 'k')`); // committed: flushed
    await app.query('BEGIN');
    for (let i = 0; i < 40; i++) await app.query(`INSERT INTO s.outbox (topic, key) VALUES ('t', 'x')`); // past the logged value
    await app.query('ROLLBACK'); // flushes nothing
    const probe = await openProbeConnection(server.url, 'test:horizon');
    probe.on('error', () => undefined);
    const horizon = new Horizon('"s"', 60_000);
    await horizon.probe(probe);
    await horizon.probe(probe);
    const released = horizon.watermark;
    // The probes saw one pair (last id 41): it is released whole once the WAL is flushed
    // past it, or not at all; never a part of the rolled-back run.
    assert.ok(released === 0 || released === 41, `released ${released}: neither nothing nor the whole pair`);
    await app.end().catch(() => undefined);
    await probe.end().catch(() => undefined);
    await server.restart('immediate'); // crash: WAL replay from what reached disk
    const after = new pg.Client({ connectionString: server.url });
    await after.connect();
    const { rows } = await after.query<{ id: string }>(`INSERT INTO s.outbox (topic, key) VALUES ('t', 'k') RETURNING id`);
    await after.end();
    assert.ok(Number(rows[0]!.id) > released, `the first id after the crash (${rows[0]!.id}) is above the released watermark ${released}`);
    // The horizon of before the crash starts over, and says what it saw (the relay logs it).
    const reprobe = await openProbeConnection(server.url, 'test:horizon-after');
    reprobe.on('error', () => undefined);
    await horizon.probe(reprobe);
    await reprobe.end().catch(() => undefined);
    assert.equal(horizon.resets, 1);
    assert.equal(horizon.lastReset?.reason, 'the server start time changed (Postgres restarted)');
    assert.notEqual(horizon.lastReset?.startedBefore, horizon.lastReset?.startedNow);
    // Positive control: the horizon does release (a watermark stuck at 0 would pass the
    // check above for nothing): once that insert committed (and so flushed), a fresh
    // horizon releases past it.
    const control = await openProbeConnection(server.url, 'test:horizon-control');
    control.on('error', () => undefined);
    const fresh = new Horizon('"s"', 60_000);
    await waitFor(`a fresh horizon releasing id ${rows[0]!.id}`, async () => {
      await fresh.probe(control);
      return fresh.watermark >= Number(rows[0]!.id);
    });
    await control.end().catch(() => undefined);
  } finally {
    await server.destroy();
  }
});
