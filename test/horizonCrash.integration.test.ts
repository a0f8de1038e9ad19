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

// A prepared transaction (two-phase commit) that wrote the outbox has no backend: its locks
// stay in pg_locks with no pid, under its virtual transaction. The horizon must still count
// it as a writer (src/relay/horizon.ts). The shared server runs with
// max_prepared_transactions = 0, so this runs a Postgres of its own.
test('integration: a prepared transaction that wrote the outbox holds later rows back until it is committed or rolled back', async () => {
  const { startLocalPostgres } = await import('../scripts/localPostgres.js');
  const { migrate } = await import('../src/commands/migrate.js');
  const { Horizon, openProbeConnection } = await import('../src/relay/horizon.js');
  const pg = (await import('pg')).default;
  const server = await startLocalPostgres({ settings: { max_prepared_transactions: '5' } });
  try {
    await migrate({ databaseUrl: server.url, schema: 's' });
    const writer = new pg.Client({ connectionString: server.url });
    await writer.connect();
    await writer.query('BEGIN');
    const held = Number((await writer.query<{ id: number }>(`INSERT INTO s.outbox (topic, key) VALUES ('t', 'k') RETURNING id`)).rows[0]!.id);
    await writer.query(`PREPARE TRANSACTION 'outbox_writer'`);
    await writer.end(); // the prepared transaction outlives its session
    const app = new pg.Client({ connectionString: server.url });
    await app.connect();
    const later = Number((await app.query<{ id: number }>(`INSERT INTO s.outbox (topic, key) VALUES ('t', 'k') RETURNING id`)).rows[0]!.id);
    const { rows: locks } = await app.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE pid IS NULL AND locktype = 'relation' AND relation = 's.outbox'::regclass`);
    assert.equal(locks[0]!.n, 1, 'the prepared transaction holds its lock on the outbox without a backend');
    const probe = await openProbeConnection(server.url, 'test:horizon-prepared');
    const horizon = new Horizon('"s"', 300_000);
    await waitFor('the later row paired', async () => {
      await horizon.probe(probe);
      return horizon.pairedUpTo >= later;
    });
    // Commits after the pair flush the WAL past it and move xmax: only the writer rule can hold it.
    await app.query('CREATE TABLE s.flush (n int)');
    for (let i = 0; i < 5; i++) {
      await app.query('INSERT INTO s.flush VALUES (1)');
      await horizon.probe(probe);
    }
    assert.ok(horizon.watermark < held, `watermark ${horizon.watermark} stays below ${held} while the prepared writer is open`);
    await app.query(`COMMIT PREPARED 'outbox_writer'`);
    await waitFor('both released once it committed', async () => {
      await horizon.probe(probe);
      return horizon.watermark >= later;
    });
    assert.equal(horizon.forcedAdvances, 0);
    await probe.end();
    await app.end();
  } finally {
    await server.destroy();
  }
});
