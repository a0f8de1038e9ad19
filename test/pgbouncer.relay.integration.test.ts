// The relay through a real PgBouncer 1.18 in transaction pooling (pool_mode = transaction,
// 8 server connections for every client): two relays, one told `pooler: 'transaction'`
// and one left at the default `auto`, drain what concurrent writers (through the same
// pooler) commit; a relay process SIGKILLed mid-stream leaves its shards to the survivor;
// a relay told `pooler: 'none'` refuses to start, naming `--pooler transaction`; so does any
// relay behind statement pooling, naming `pool_mode`.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { getStatus } from '../src/commands/status.js';
import { createLogger } from '../src/shared/logger.js';
import type { TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli, type Spawned } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { assertDeliveredInOrder, runWriters } from './helpers/workload.js';
import { sentCount } from './helpers/outbox.js';
import { pgBouncerFixture, startPgBouncer, type PgBouncer, type PgBouncerFixture } from './helpers/pgbouncer.js';

const LEASE_TTL_MS = 2_000;
let db: TestSchema;
let bouncer: PgBouncer;
/** The application's pool: through PgBouncer too. */
let pooled: pg.Pool;

let fixture: PgBouncerFixture | undefined;
before(async () => {
  fixture = await pgBouncerFixture('pgb_relay', { mode: 'transaction', poolSize: 8, clients: 8 });
  ({ db, bouncer, pooled } = fixture);
});
after(async () => {
  await fixture?.close();
});

/** A logger whose lines the test can read. */
function capturedLogger(): { logger: ReturnType<typeof createLogger>; lines: () => Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { logger, lines: () => lines };
}

async function ownersByShardCount(): Promise<number[]> {
  const status = await getStatus({ client: db.pool as never, schema: db.schema });
  return status.relays.filter((r) => r.live && r.shardCount > 0).map((r) => r.shardCount).sort((a, b) => a - b);
}

test('integration (PgBouncer, transaction pooling): a `transaction` relay and an `auto` relay drain 2,000+ rows of concurrent writers: every row published, per-key order kept, all marked sent', async () => {
  const topic = await createTopic(4);
  const base = { producer: TEST_PRODUCER, databaseUrl: bouncer.url(), kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 50, leaseTtlMs: LEASE_TTL_MS };
  const auto = capturedLogger();
  const relays: Relay[] = [createRelay({ ...base, pooler: 'transaction' }), createRelay({ ...base, logger: auto.logger })];
  for (const r of relays) await r.start();
  try {
    await waitFor('a fair split', () => relays[0]!.ownedShards.length === 128 && relays[1]!.ownedShards.length === 128, { timeoutMs: 30_000 });
    const { committed, rolledBack } = await runWriters({ pool: pooled, schema: db.schema, topic, writers: 6, transactionsPerWriter: 200, keys: 40, rollbackEvery: 10, holdEvery: 7, holdMs: 15 });
    assert.ok(committed.size >= 2_000, `${committed.size} rows committed`);
    await waitFor('every committed row marked sent', async () => (await sentCount(db, topic)) === committed.size, { timeoutMs: 60_000 });
    await assertDeliveredInOrder(topic, committed, rolledBack);
    const unsent = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL`, [topic]);
    assert.equal(unsent.rows[0]!.n, 0);
  } finally {
    await Promise.all(relays.map((r) => r.stop()));
  }
  // The `auto` relay found the pooler by itself and said so.
  assert.ok(
    auto.lines().some((l) => /transaction-pooling proxy/.test(String(l.msg))),
    `the auto relay logged the pooler it found: ${JSON.stringify(auto.lines().map((l) => l.msg))}`,
  );
  const status = await getStatus({ client: db.pool as never, schema: db.schema });
  assert.equal(status.relays.length, 0, 'stopped relays leave the group');
  assert.equal(status.unownedShards, '0-255', 'and give their shards back');
});

function relayProcess(pooler?: 'transaction'): Spawned {
  return spawnCli(['run', '--batch-size', '50', ...(pooler ? ['--pooler', pooler] : [])], {
    DATABASE_URL: bouncer.url(),
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_LEASE_TTL_MS: String(LEASE_TTL_MS),
    OUTBOX_LOG_LEVEL: 'warn',
  });
}

test('integration (PgBouncer, transaction pooling): a relay process SIGKILLed mid-stream: the survivor takes its shards and finishes, nothing lost or reordered', async () => {
  const topic = await createTopic(4);
  const a = relayProcess('transaction');
  const b = relayProcess();
  try {
    await waitFor('two live relays with 128 shards each', async () => (await ownersByShardCount()).join() === '128,128', { timeoutMs: 40_000 });
    let killedAt = 0;
    let takeover: Promise<unknown> | undefined;
    const { committed, rolledBack } = await runWriters({
      pool: pooled,
      schema: db.schema,
      topic,
      writers: 4,
      transactionsPerWriter: 250,
      keys: 30,
      rollbackEvery: 9,
      holdEvery: 5,
      holdMs: 10,
      onCommit: (n) => {
        if (n === 250) {
          a.child.kill('SIGKILL'); // mid-stream, likely with a batch claimed and in flight
          killedAt = Date.now();
          takeover = waitFor('the survivor to own every shard', async () => (await ownersByShardCount()).join() === '256', { timeoutMs: 30_000, intervalMs: 20 });
        }
      },
    });
    await takeover;
    const takeoverMs = Date.now() - killedAt;
    assert.ok(takeoverMs < LEASE_TTL_MS * 4, `took over in ${takeoverMs} ms`);
    await waitFor('every committed row marked sent', async () => (await sentCount(db, topic)) === committed.size, { timeoutMs: 60_000 });
    await assertDeliveredInOrder(topic, committed, rolledBack);
    assert.equal(await a.exited, 'SIGKILL');
  } finally {
    a.child.kill('SIGKILL');
    b.child.kill('SIGTERM');
    await a.exited;
    assert.equal(await b.exited, 0, b.output());
  }
});

test('integration (PgBouncer, transaction pooling): a relay told `pooler: none` fails fast, naming `--pooler transaction`, the library and the CLI', async () => {
  const started = Date.now();
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: bouncer.url(), kafkaBrokers: testBrokers(), schema: db.schema, pooler: 'none' });
  await assert.rejects(relay.start(), (error: Error) => {
    assert.match(error.message, /--pooler transaction/);
    return true;
  });
  await relay.stop();
  assert.ok(Date.now() - started < 15_000, `rejected in ${Date.now() - started} ms`);

  const cliStarted = Date.now();
  const cli = spawnCli(['run', '--pooler', 'none'], { DATABASE_URL: bouncer.url(), KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'warn' });
  const code = await cli.exited;
  assert.notEqual(code, 0, cli.output());
  assert.ok(Date.now() - cliStarted < 30_000, `exited in ${Date.now() - cliStarted} ms`);
  const lines = cli.output().trim().split('\n').filter((l) => /--pooler transaction/.test(l));
  assert.equal(lines.length, 1, `one line names the fix:\n${cli.output()}`);
  // It never claimed anything: no shard was taken.
  assert.equal((await getStatus({ client: db.pool as never, schema: db.schema })).unownedShards, '0-255');
});

test('integration (PgBouncer, statement pooling): the relay refuses to start, naming pool_mode, whatever --pooler says', async () => {
  const statement = await startPgBouncer({ mode: 'statement', poolSize: 2 });
  try {
    for (const pooler of ['auto', 'none'] as const) {
      const started = Date.now();
      const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: statement.url(), kafkaBrokers: testBrokers(), schema: db.schema, pooler });
      await assert.rejects(relay.start(), (error: Error) => {
        assert.match(error.message, /^pool_mode: .*statement mode.*set pool_mode = transaction \(or session\)/);
        return true;
      });
      await relay.stop();
      assert.ok(Date.now() - started < 15_000, `${pooler}: rejected in ${Date.now() - started} ms`);
    }
  } finally {
    await statement.stop();
  }
});
