import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { getStatus } from '../src/commands/status.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli, type Spawned } from './helpers/processes.js';
import { liveLeasesByOwner } from './helpers/leases.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder, runWriters } from './helpers/workload.js';
import { sentCount as sentRows } from './helpers/outbox.js';

const LEASE_TTL_MS = 2_000;
let db: TestSchema;
before(async () => {
  db = await createTestSchema('scale');
});
after(async () => {
  await db.drop();
});

const sentCount = (topic: string): Promise<number> => sentRows(db, topic);

async function ownersByShardCount(): Promise<number[]> {
  const status = await getStatus({ client: db.pool as never, schema: db.schema });
  return status.relays.filter((r) => r.live && r.shardCount > 0).map((r) => r.shardCount).sort((a, b) => a - b);
}

test('integration: two relays split the shards fairly and publish every committed row in per-key order while writers commit out of order', async () => {
  const topic = await createTopic(4);
  const options = { producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 50, leaseTtlMs: LEASE_TTL_MS };
  const relays: Relay[] = [createRelay(options), createRelay(options)];
  // Rows published by each worker (the default two) of each relay.
  const byWorker = relays.map(() => [0, 0]);
  relays.forEach((r, i) => r.on('batch', (b) => (byWorker[i]![b.worker]! += b.count)));
  for (const r of relays) await r.start();
  try {
    await waitFor('a fair split', async () => {
      const counts = relays.map((r) => r.ownedShards.length);
      return counts[0] === 128 && counts[1] === 128;
    });
    const disjoint = new Set([...relays[0]!.ownedShards, ...relays[1]!.ownedShards]);
    assert.equal(disjoint.size, 256, 'each shard has one owner');

    const { committed, rolledBack } = await runWriters({ pool: db.pool, schema: db.schema, topic, writers: 6, transactionsPerWriter: 300, keys: 40, rollbackEvery: 10, holdEvery: 7, holdMs: 15 });
    await waitFor('every committed row sent', async () => (await sentCount(topic)) === committed.size);
    await assertDeliveredInOrder(topic, committed, rolledBack);
    // Each relay's shards are split among its own workers (src/relay/shards.ts): when
    // workers took every second shard, relay 0 owned only its worker 0's and relay 1 only
    // its worker 1's, and each relay published with one worker.
    assert.ok(byWorker.every((w) => w.every((rows) => rows > 0)), `rows per worker of each relay: ${JSON.stringify(byWorker)}`);
  } finally {
    await Promise.all(relays.map((r) => r.stop()));
  }
  const status = await getStatus({ client: db.pool as never, schema: db.schema });
  assert.equal(status.relays.length, 0, 'stopped relays leave the group');
  assert.equal(status.unownedShards, '0-255', 'and give their shards back');
});

test('integration: relays joining and leaving rebalance the shards fairly', async () => {
  const options = { producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, leaseTtlMs: LEASE_TTL_MS };
  const relays: Relay[] = [];
  try {
    for (let n = 1; n <= 3; n++) {
      const r = createRelay(options);
      await r.start();
      relays.push(r);
      const share = Math.floor(256 / n);
      await waitFor(`${n} relays with ${share}-${share + 1} shards each`, () =>
        relays.every((x) => x.ownedShards.length >= share && x.ownedShards.length <= share + 1) && relays.reduce((a, x) => a + x.ownedShards.length, 0) === 256,
      );
    }
    await relays.shift()!.stop();
    await waitFor('2 relays with 128 each after one left', () => relays.every((x) => x.ownedShards.length === 128));
  } finally {
    await Promise.all(relays.map((r) => r.stop()));
  }
});

function relayProcess(): Spawned {
  return spawnCli(['run', '--batch-size', '50'], {
    DATABASE_URL: db.databaseUrl,
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_LEASE_TTL_MS: String(LEASE_TTL_MS),
    OUTBOX_LOG_LEVEL: 'warn',
    OUTBOX_PRODUCER: TEST_PRODUCER,
  });
}

test('integration: a relay killed with SIGKILL loses its shards to the survivor within 1.4 × the lease TTL (docs/relay.md, Takeover)', async () => {
  const a = relayProcess();
  const b = relayProcess();
  try {
    await waitFor('two live relays with 128 shards each', async () => (await ownersByShardCount()).join() === '128,128', { timeoutMs: 30_000 });
    const heldBy = (): Promise<Map<string, number>> => liveLeasesByOwner(db.pool, db.schema);
    const before = await heldBy();
    a.child.kill('SIGKILL');
    const killedAt = Date.now();
    assert.equal(await a.exited, 'SIGKILL', 'the relay died by the SIGKILL, not by a clean stop that gives its leases back');
    // The precondition: the killed relay still held its half when it died (a clean leave would hand it over at once).
    assert.deepEqual([...before.values()].sort(), [128, 128], `leases before the kill: ${JSON.stringify([...before])}`);
    let survivor: string | undefined;
    await waitFor('the survivor to hold every shard', async () => {
      const held = await heldBy();
      survivor = [...held].find(([, n]) => n === 256)?.[0];
      return survivor !== undefined;
    }, { timeoutMs: 30_000, intervalMs: 10 });
    const takeoverMs = Date.now() - killedAt;
    assert.ok(survivor !== undefined && before.has(survivor), 'one of the two relays took over, not a newcomer');
    // Lease expiry (TTL after its last renewal) plus at most one renewal round of the survivor (TTL/3).
    assert.ok(takeoverMs <= LEASE_TTL_MS * 1.4, `took over in ${takeoverMs} ms, bound ${LEASE_TTL_MS * 1.4} ms`);
  } finally {
    a.child.kill('SIGKILL');
    b.child.kill('SIGTERM');
    await Promise.all([a.exited, b.exited]);
  }
});

test('integration: a relay paused (SIGSTOP) past its lease is fenced off; after SIGCONT nothing is lost or reordered and it rejoins', async () => {
  const topic = await createTopic(4);
  const a = relayProcess();
  const b = relayProcess();
  try {
    await waitFor('two live relays', async () => (await ownersByShardCount()).join() === '128,128', { timeoutMs: 30_000 });
    let takeover: Promise<unknown> | undefined;
    let resumed = false;
    const { committed, rolledBack } = await runWriters({
      pool: db.pool,
      schema: db.schema,
      topic,
      writers: 4,
      transactionsPerWriter: 400,
      keys: 30,
      rollbackEvery: 9,
      holdEvery: 5,
      holdMs: 10,
      onCommit: async (n) => {
        if (n >= 300 && !takeover) {
          a.child.kill('SIGSTOP'); // mid-stream, likely with a batch claimed and locked
          takeover = waitFor('the other relay to take every shard over', async () => (await ownersByShardCount()).join() === '256', { timeoutMs: 30_000 }).catch(async (e: Error) => {
            const st = await getStatus({ client: db.pool as never, schema: db.schema });
            throw new Error(`${e.message}\n${JSON.stringify(st.relays.map((r) => [r.relayId, r.live, r.heartbeatAgeSeconds, r.shardCount]))} unowned ${st.unownedShards}\nB: ${b.output().slice(-2000)}`);
          });
        }
        // Writers keep writing while A is stopped; A wakes only after the takeover.
        if (n >= 900 && !resumed) {
          resumed = true;
          await takeover;
          a.child.kill('SIGCONT');
        }
      },
    });
    await takeover;
    assert.ok(resumed);
    await waitFor('the woken relay to rejoin with its share', async () => (await ownersByShardCount()).join() === '128,128', { timeoutMs: 30_000 }).catch(async (e: Error) => {
      const st = await getStatus({ client: db.pool as never, schema: db.schema });
      throw new Error(`${e.message}\n${JSON.stringify(st.relays.map((r) => [r.relayId, r.live, r.heartbeatAgeSeconds, r.shardCount]))} unowned ${st.unownedShards}\nA: ${a.output().slice(-3000)}\nB: ${b.output().slice(-2000)}`);
    });
    await waitFor('every committed row sent', async () => (await sentCount(topic)) === committed.size, { timeoutMs: 60_000 });
    await assertDeliveredInOrder(topic, committed, rolledBack);
  } finally {
    a.child.kill('SIGCONT');
    a.child.kill('SIGTERM');
    b.child.kill('SIGTERM');
    assert.equal(await a.exited, 0, a.output());
    assert.equal(await b.exited, 0, b.output());
  }
});

test('integration: outbox-relay status shows which relay owns which shards', async () => {
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, leaseTtlMs: LEASE_TTL_MS });
  await relay.start();
  try {
    await waitFor('shards owned', () => relay.ownedShards.length === 256);
    const out = spawnCli(['status', '--json'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
    assert.equal(await out.exited, 0, out.output());
    const status = JSON.parse(out.output());
    const me = status.relays.find((r: { relayId: string }) => r.relayId === relay.instanceId);
    assert.equal(me.shards, '0-255');
    assert.equal(me.live, true);
    const table = spawnCli(['status'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema });
    assert.equal(await table.exited, 0);
    assert.match(table.output(), new RegExp(`${relay.instanceId}\\s+live\\s+.*256\\s+0-255`));
  } finally {
    await relay.stop();
  }
});
