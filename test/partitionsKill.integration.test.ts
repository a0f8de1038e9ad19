import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { listPartitions } from '../src/relay/partitions.js';
import { maintainPartitions, partitionOutbox } from '../src/commands/partitions.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder } from './helpers/workload.js';
import { startWriters } from './helpers/partitionWriters.js';
import { spawnCli } from './helpers/processes.js';

// A crash in the middle of a detach on a partitioned outbox (docs/partitioning.md), with
// writers running and a relay SIGKILLed at the same moment: nothing is lost, and the next
// relay finishes the detach the crash left pending (DETACH ... FINALIZE), then drops it.
//
// The detach is the test's own, on a connection it terminates: a relay's pass picks its
// moment itself, and a test that waited for it to start a detach at the right time was
// at the mercy of the pass's timing (it failed on Node 24 waiting for it). The first
// relay runs with maintenance off, so that no pass of its own finishes the detach (a
// FINALIZE waiting for the held transaction would go on after the relay's death).

let db: TestSchema;
after(async () => {
  await db?.drop();
});

test('integration: a detach left pending by a crash on a partitioned outbox (its backend terminated, the relay SIGKILLed), writers running: the next relay finishes and drops it, every committed row is delivered in key order', async () => {
  db = await createTestSchema('partkill');
  await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
  // Room for the writers until the second relay's first pass (a writer stops at its first error).
  await maintainPartitions({ pool: db.pool, schema: db.schema, partitionsAhead: 100, retention: '0s' });
  const topic = await createTopic(4);
  const env = {
    DATABASE_URL: db.databaseUrl,
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_LOG_LEVEL: 'warn',
    OUTBOX_PRODUCER: TEST_PRODUCER,
  };
  const relayArgs = ['run', '--batch-size', '100', '--partition-retention', '0s', '--partitions-ahead', '100'];
  const writers = startWriters(db.pool, db.schema, topic, 3, 30);
  const first = spawnCli([...relayArgs, '--partition-maintenance-interval-ms', '0'], env);
  const holder = await db.pool.connect();
  const detacher = new pg.Client({ connectionString: db.databaseUrl });
  detacher.on('error', () => undefined);
  await detacher.connect();
  let second: ReturnType<typeof spawnCli> | undefined;
  try {
    const [p0] = await listPartitions(db.pool, db.schema);
    assert.equal(p0?.name, 'outbox_p0');
    const q = `"${db.schema}"`;
    await waitFor('the first partition full and all of it sent', async () => {
      const { rows } = await db.pool.query<{ done: boolean }>(
        `SELECT (SELECT last_value FROM ${q}.outbox_id_seq) >= $1 AND NOT EXISTS (SELECT 1 FROM ${q}.outbox_p0 WHERE sent_at IS NULL) AS done`,
        [p0!.upper],
      );
      return rows[0]!.done && writers.rows >= 2_000;
    }, { timeoutMs: 120_000 });
    if (writers.error) throw writers.error;

    // A transaction that has read the outbox, held open: the detach commits its first
    // phase (the partition marked pending), then waits for it.
    await holder.query('BEGIN');
    await holder.query(`SELECT count(*) FROM ${q}.outbox WHERE false`);
    const { rows: pidRows } = await detacher.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const detaching = detacher.query(`ALTER TABLE ${q}.outbox DETACH PARTITION ${q}.outbox_p0 CONCURRENTLY`).catch((error: Error) => error);
    await waitFor('the detach marked pending and waiting for the held transaction', async () => {
      const { rows } = await db.pool.query<{ waiting: boolean }>(`SELECT wait_event = 'virtualxid' AS waiting FROM pg_stat_activity WHERE pid = $1`, [pidRows[0]!.pid]);
      return rows[0]?.waiting === true && (await listPartitions(db.pool, db.schema)).some((p) => p.name === 'outbox_p0' && p.detachPending);
    }, { timeoutMs: 30_000 });

    // The crash: the relay process and the detaching backend go at once.
    first.child.kill('SIGKILL');
    assert.equal(await first.exited, 'SIGKILL');
    await db.pool.query('SELECT pg_terminate_backend($1, 10000)', [pidRows[0]!.pid]);
    assert.ok((await detaching) instanceof Error, 'the detach did not finish');
    await holder.query('COMMIT');
    assert.ok((await listPartitions(db.pool, db.schema)).find((p) => p.name === 'outbox_p0')?.detachPending, 'left pending');

    second = spawnCli([...relayArgs, '--partition-maintenance-interval-ms', '200'], env);
    await waitFor('the next relay to finish detaching outbox_p0 and drop it', async () => {
      const r = await db.pool.query(`SELECT to_regclass($1) AS t`, [`${q}.outbox_p0`]);
      return r.rows[0].t === null;
    }, { timeoutMs: 60_000 });
    const atRestart = writers.rows;
    await waitFor('writers to go on past the restart', () => {
      if (writers.error) throw writers.error;
      return writers.rows >= atRestart + 1_000;
    });
    await writers.stop();
    await assertDeliveredInOrder(topic, writers.committed, new Set());
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    await detacher.end().catch(() => undefined);
    await writers.stop().catch(() => undefined);
    first.child.kill('SIGKILL');
    if (second) {
      second.child.kill('SIGTERM');
      assert.equal(await second.exited, 0, second.output());
    }
  }
});
