// Several outboxes in one process (the relay group) through a real PgBouncer 1.18 in
// transaction pooling, the pooler left to `auto`: in the library (createRelayGroup), with
// PgBouncer restarted mid-run, and in the CLI (`run --outboxes-file`).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { createRelayGroup } from '../src/relay/relayGroup.js';
import { migrate } from '../src/commands/migrate.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder, runWriters } from './helpers/workload.js';
import { sentCount } from './helpers/outbox.js';
import { startPgBouncer, type PgBouncer } from './helpers/pgbouncer.js';

let a: TestSchema;
let b: TestSchema;
let bouncer: PgBouncer;
let pooled: pg.Pool;
let dir: string;

before(async () => {
  [a, b] = [await createTestSchema('pgb_group_a'), await createTestSchema('pgb_group_b')];
  bouncer = await startPgBouncer({ mode: 'transaction', poolSize: 8 });
  pooled = new pg.Pool({ connectionString: bouncer.url(), max: 6 });
  pooled.on('error', () => undefined);
  dir = mkdtempSync('/tmp/outbox-pgb-group-');
});
after(async () => {
  try {
    await pooled?.end();
  } finally {
    await bouncer?.stop();
    rmSync(dir, { recursive: true, force: true });
    await a?.drop();
    await b?.drop();
  }
});

const write = (schema: string, topic: string, transactionsPerWriter: number) =>
  runWriters({ pool: pooled, schema, topic, writers: 3, transactionsPerWriter, keys: 20, rollbackEvery: 9, holdEvery: 5, holdMs: 10 });

function merge(into: { committed: Set<string>; rolledBack: Set<string> }, more: { committed: Set<string>; rolledBack: Set<string> }): void {
  for (const id of more.committed) into.committed.add(id);
  for (const id of more.rolledBack) into.rolledBack.add(id);
}

test('integration (PgBouncer, transaction pooling): a relay group of two outboxes publishes both in order, and rides out a PgBouncer restart', async () => {
  const [topicA, topicB] = [await createTopic(3), await createTopic(3)];
  const group = createRelayGroup({
    outboxes: [
      { name: 'orders', databaseUrl: bouncer.url(), schema: a.schema },
      { name: 'billing', databaseUrl: bouncer.url(), schema: b.schema },
    ],
    kafkaBrokers: testBrokers(),
    producer: TEST_PRODUCER,
    batchSize: 50,
    leaseTtlMs: 2_000,
    retryMaxDelayMs: 500,
  });
  await group.start();
  try {
    assert.deepEqual(group.outboxes.map((o) => [o.name, o.state]), [['orders', 'running'], ['billing', 'running']]);
    const [wa, wb] = await Promise.all([write(a.schema, topicA, 120), write(b.schema, topicB, 120)]);
    // Every client connection is cut, the relays' included; they reconnect on the same port.
    await bouncer.restart();
    const [wa2, wb2] = await Promise.all([write(a.schema, topicA, 60), write(b.schema, topicB, 60)]);
    merge(wa, wa2);
    merge(wb, wb2);
    await waitFor('both outboxes sent', async () => (await sentCount(a, topicA)) === wa.committed.size && (await sentCount(b, topicB)) === wb.committed.size, { timeoutMs: 60_000 });
    await assertDeliveredInOrder(topicA, wa.committed, wa.rolledBack);
    await assertDeliveredInOrder(topicB, wb.committed, wb.rolledBack);
    assert.deepEqual(group.outboxes.map((o) => o.state), ['running', 'running']);
  } finally {
    const stopped = await group.stop();
    assert.equal(stopped.hard, false);
  }
});

test('integration (PgBouncer, transaction pooling): `outbox-relay migrate` and `run --outboxes-file` over two outboxes through it', async () => {
  const [topicA, topicB] = [await createTopic(2), await createTopic(2)];
  // A third schema, migrated by the CLI through PgBouncer.
  const c = `${a.schema}_c`;
  const file = join(dir, 'outboxes.json');
  writeFileSync(file, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: a.schema }, { name: 'three', databaseUrlEnv: 'ONE_URL', schema: c }] }));
  const env = { ONE_URL: bouncer.url(), KAFKA_BROKERS: testBrokers().join(','), OUTBOX_LOG_LEVEL: 'warn', OUTBOX_LEASE_TTL_MS: '2000' };
  try {
    const migrated = spawnCli(['migrate', '--outboxes-file', file], env);
    assert.equal(await migrated.exited, 0, migrated.output());
    const third = { pool: pooled, schema: c };
    await migrate({ databaseUrl: bouncer.url(), schema: c }); // already there: applies nothing
    const run = spawnCli(['run', '--outboxes-file', file, '--batch-size', '50'], env);
    try {
      const [w1, w3] = await Promise.all([write(a.schema, topicA, 60), write(c, topicB, 60)]);
      await waitFor('both outboxes sent', async () => (await sentCount(a, topicA)) === w1.committed.size && (await sentCount(third, topicB)) === w3.committed.size, { timeoutMs: 60_000 }).catch(
        (error: Error) => {
          throw new Error(`${error.message}\n${run.output().slice(-3000)}`);
        },
      );
      await assertDeliveredInOrder(topicA, w1.committed, w1.rolledBack);
      await assertDeliveredInOrder(topicB, w3.committed, w3.rolledBack);
    } finally {
      run.child.kill('SIGTERM');
      assert.equal(await run.exited, 0, run.output());
    }
  } finally {
    await a.pool.query(`DROP SCHEMA IF EXISTS "${c}" CASCADE`);
  }
});
