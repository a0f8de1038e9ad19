import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { listPartitions } from '../src/relay/partitions.js';
import { partitionOutbox } from '../src/commands/partitions.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder } from './helpers/workload.js';
import { startWriters } from './helpers/partitionWriters.js';
import { spawnCli } from './helpers/processes.js';

// A relay process SIGKILLed on a partitioned outbox (docs/partitioning.md) while its
// partition maintenance is in the middle of a detach: nothing is lost, and the next
// relay finishes the detach the crash left pending.

let db: TestSchema;
after(async () => {
  await db?.drop();
});

test('integration: a relay SIGKILLed mid-detach on a partitioned outbox, writers running: the next relay finishes the pending detach, every committed row is delivered in key order', async () => {
  db = await createTestSchema('partkill');
  await partitionOutbox({ pool: db.pool, schema: db.schema, partitionSizeIds: 1_000 });
  const topic = await createTopic(4);
  const env = {
    DATABASE_URL: db.databaseUrl,
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_LOG_LEVEL: 'warn',
    OUTBOX_PRODUCER: TEST_PRODUCER,
  };
  // Partitions far enough ahead for the writers to outlast the crash: no maintainer runs
  // between the kill and the next relay's first pass.
  const args = ['run', '--batch-size', '100', '--partition-maintenance-interval-ms', '200', '--partition-retention', '0s', '--partitions-ahead', '20'];
  const writers = startWriters(db.pool, db.schema, topic, 3, 30);
  const first = spawnCli(args, env);
  const holder = await db.pool.connect();
  let second: ReturnType<typeof spawnCli> | undefined;
  try {
    await waitFor('the first relay to drop a partition', async () => writers.rows >= 2_000 && !(await listPartitions(db.pool, db.schema)).some((p) => p.name === 'outbox_p0'), { timeoutMs: 120_000 });
    // A transaction that has read the outbox, held open, makes the relay's next detach wait
    // for it. A reader, not a writer: a writer's open transaction would also hold the
    // horizon back, and with it every partition the relay could detach.
    await holder.query('BEGIN');
    await holder.query(`SELECT count(*) FROM "${db.schema}".outbox WHERE false`);
    // Its second phase, which waits for the transactions using the outbox (virtualxid),
    // after the first has committed the pending state; the first phase may wait for a
    // lock too (autovacuum on the partition), and a crash there leaves nothing pending.
    // Both seen before the crash: the detach waiting, and its first phase committed (the
    // partition marked pending). A crash before that commit leaves nothing pending (one CI
    // run on Node 24 killed a detach seen waiting whose pending state never showed).
    const detach = await waitFor('a detach waiting for the held transaction, its partition marked pending', async () => {
      const r = await db.pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE%DETACH PARTITION%CONCURRENTLY' AND wait_event = 'virtualxid'`,
      );
      const pid = r.rows[0]?.pid;
      return pid !== undefined && (await listPartitions(db.pool, db.schema)).some((p) => p.detachPending) ? pid : undefined;
    }, { timeoutMs: 60_000 });
    // The crash: the relay process and its waiting backend go at once.
    first.child.kill('SIGKILL');
    assert.equal(await first.exited, 'SIGKILL');
    await db.pool.query('SELECT pg_terminate_backend($1)', [detach]);
    const pending = await waitFor('the detach left pending', async () => (await listPartitions(db.pool, db.schema)).find((p) => p.detachPending)?.name);
    await holder.query('COMMIT');

    second = spawnCli(args, env);
    await waitFor(`the next relay to finish detaching ${pending} and drop it`, async () => {
      const r = await db.pool.query(`SELECT to_regclass($1) AS t`, [`"${db.schema}".${pending}`]);
      return r.rows[0].t === null;
    }, { timeoutMs: 60_000 });
    const atRestart = writers.rows;
    await waitFor('writers to go on past the restart', () => writers.rows >= atRestart + 1_000);
    await writers.stop();
    await assertDeliveredInOrder(topic, writers.committed, new Set());
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    await writers.stop().catch(() => undefined);
    first.child.kill('SIGKILL');
    if (second) {
      second.child.kill('SIGTERM');

      assert.equal(await second.exited, 0, second.output());
    }
  }
});
