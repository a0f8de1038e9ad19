import { test } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { startLocalPostgres } from '../scripts/localPostgres.js';
import { PostmasterCpuMeter } from '../bench/postmasterCpu.js';
import { AutovacuumMeter, postmasterPid } from '../bench/retentionSampler.js';
import { cpuTicks } from '../bench/procCpu.js';
import { waitFor } from './helpers/wait.js';

// The retention section's cleanup CPU (bench/sections/retention.ts) rests on this meter:
// the CPU of Postgres children that exit inside the window, read from what the postmaster
// reaped, charged to the right kind.
test('integration: the postmaster CPU meter charges a backend that exits in the window exactly, and counts the autovacuum workers that ran', async () => {
  const server = await startLocalPostgres({ settings: { autovacuum_naptime: '1s', max_parallel_workers_per_gather: 0 } });
  const admin = new pg.Client({ connectionString: server.url });
  try {
    await admin.connect();
    const pm = await postmasterPid(admin);
    const meter = new PostmasterCpuMeter(pm);
    const sampled = new AutovacuumMeter(pm);
    meter.start();
    sampled.start();

    // A backend of a kind of its own that works, idles, and exits: the meter must charge it
    // its CPU read from /proc while it idles just before its exit (to a tick of rounding),
    // plus its exit's own work (tearing down the shared memory it mapped: a few ms).
    const worker = new pg.Client({ connectionString: server.url, application_name: 'work' });
    await worker.connect();
    const workerPid = (await worker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    meter.name(workerPid, 'work');
    await worker.query('SELECT count(*) FROM generate_series(1, 3000000)');
    const idle = cpuTicks(workerPid)!;
    await worker.end();
    await waitFor('the worker backend reaped', () => cpuTicks(workerPid) === undefined);

    // Dead tuples enough for autovacuum (threshold 50 + 20 % of the table): every row deleted.
    await admin.query('CREATE TABLE t (id bigint PRIMARY KEY, pad text)');
    await admin.query(`INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g`);
    await admin.query('ANALYZE t');
    await admin.query('DELETE FROM t');
    const runs = async (): Promise<number> => Number((await admin.query<{ n: string }>(`SELECT autovacuum_count AS n FROM pg_stat_user_tables WHERE relname = 't'`)).rows[0]!.n);
    await waitFor('an autovacuum of t', async () => (await runs()) >= 1, { timeoutMs: 60_000, intervalMs: 100 });
    const result = meter.stop();
    const sampledSeconds = sampled.stop();

    const work = Math.round(result.seconds.work! * 100);
    assert.equal(result.exits.work, 1, JSON.stringify(result));
    assert.ok(work >= idle - 1 && work <= idle + 4, `the exited backend: ${work} ticks charged, ${idle} read while it idled (${JSON.stringify(result)})`);
    // Children too short-lived to be identified: here, with no other connection coming and going, autovacuum workers.
    const autovacuum = (result.seconds.autovacuum ?? 0) + (result.seconds.unseen ?? 0) + (result.seconds.untitled ?? 0);
    assert.ok(autovacuum > 0, `autovacuum ran ${await runs()} times and the meter charged it nothing: ${JSON.stringify(result)}`);
    // The sampled figure is a lower bound of the exact one (both count whole ticks).
    assert.ok(sampledSeconds <= autovacuum + 0.02, `sampled ${sampledSeconds} s, exact ${autovacuum} s`);
    assert.deepEqual(Object.keys(result.exits).sort(), ['autovacuum', 'untitled', 'work'].filter((k) => k in result.exits).sort(), `no other child exited: ${JSON.stringify(result)}`);
    console.log(`autovacuum runs ${await runs()}; exact ${autovacuum.toFixed(2)} s (${JSON.stringify(result)}); sampled every 50 ms ${sampledSeconds.toFixed(2)} s; exited backend ${work} ticks, ${idle} before its exit`);
  } finally {
    await admin.end().catch(() => undefined);
    await server.destroy();
  }
});
