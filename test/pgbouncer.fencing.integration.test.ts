// Fencing through a real PgBouncer 1.18 in transaction pooling: a relay process frozen
// (SIGSTOP) in the middle of a batch, its claimed rows locked on a server connection, is
// taken over; the survivor terminates that batch's backend and only it (the writers going
// through the same PgBouncer, on server connections that carried the frozen relay's
// application_name before, go on untouched); after SIGCONT nothing is lost or reordered.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { getStatus } from '../src/commands/status.js';
import type { TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { spawnCli, type Spawned } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { assertDeliveredInOrder, runWriters } from './helpers/workload.js';
import { sentCount } from './helpers/outbox.js';
import { pgBouncerFixture, type PgBouncer, type PgBouncerFixture } from './helpers/pgbouncer.js';

const LEASE_TTL_MS = 2_000;
let db: TestSchema;
let bouncer: PgBouncer;
let pooled: pg.Pool;

let fixture: PgBouncerFixture | undefined;
before(async () => {
  fixture = await pgBouncerFixture('pgb_fence', { mode: 'transaction', poolSize: 8, clients: 4 });
  ({ db, bouncer, pooled } = fixture);
});
after(async () => {
  await fixture?.close();
});

function relayProcess(pooler?: 'transaction'): Spawned {
  return spawnCli(['run', '--batch-size', '20', ...(pooler ? ['--pooler', pooler] : [])], {
    DATABASE_URL: bouncer.url(),
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_SCHEMA: db.schema,
    OUTBOX_LEASE_TTL_MS: String(LEASE_TTL_MS),
    OUTBOX_LOG_LEVEL: 'warn',
  });
}

async function live(): Promise<Array<{ relayId: string; shardCount: number }>> {
  return (await getStatus({ client: db.pool as never, schema: db.schema })).relays.filter((r) => r.live && r.shardCount > 0);
}

/**
 * Backends inside a transaction whose statement carries the relay's batch marker: with
 * `claimedRows`, only those that locked rows (hold a transaction id); without it, every
 * such transaction, as the survivor's fencing finds them (a claim ahead that found no row
 * holds no transaction id, and is the frozen relay's open transaction all the same).
 */
async function batchBackends(relayId: string, claimedRows = false): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' ${claimedRows ? 'AND backend_xid IS NOT NULL' : ''} AND left(query, length($1)) = $1`,
    [`/* outbox-relay batch ${relayId} */`],
  );
  return rows[0]!.n;
}

/** Backends still running a statement of the relay's batches (a claim sent just before SIGSTOP). */
async function runningBatchStatements(relayId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND left(query, length($1)) = $1", [
    `/* outbox-relay batch ${relayId} */`,
  ]);
  return rows[0]!.n;
}

test('integration (PgBouncer, transaction pooling): a relay frozen mid-batch is fenced by the survivor, which terminates that batch and nothing else', async () => {
  const topic = await createTopic(4);
  const a = relayProcess('transaction');
  let b: Spawned | undefined;
  let writing: Promise<{ committed: Set<string>; rolledBack: Set<string> }> | undefined;
  try {
    const [first] = await waitFor('the first relay with every shard', async () => ((await live()).map((r) => r.shardCount).join() === '256' ? live() : undefined), { timeoutMs: 40_000 });
    const frozenId = first!.relayId;
    b = relayProcess();
    await waitFor('two relays with 128 shards each', async () => (await live()).map((r) => r.shardCount).sort().join() === '128,128', { timeoutMs: 40_000 });

    writing = runWriters({ pool: pooled, schema: db.schema, topic, writers: 3, transactionsPerWriter: 500, keys: 30, rollbackEvery: 9, holdEvery: 5, holdMs: 10 });
    // Freeze it while a batch of it is open: seen open, SIGSTOP, and still open once it is
    // frozen (a batch that ended in between: let it go on and try again).
    let frozen = false;
    let openBatches = 0;
    for (let attempt = 0; attempt < 200 && !frozen; attempt++) {
      await waitFor('a batch of the first relay open', async () => (await batchBackends(frozenId, true)) > 0, { timeoutMs: 20_000, intervalMs: 2 });
      a.child.kill('SIGSTOP');
      // A statement sent just before the signal still runs (the next batch claimed ahead,
      // say) and opens one more batch when it ends: count once the frozen relay's
      // statements are done, as the survivor will find them.
      await waitFor('the frozen relay\'s statements to finish', async () => (await runningBatchStatements(frozenId)) === 0, { timeoutMs: 10_000, intervalMs: 5 });
      openBatches = await batchBackends(frozenId);
      frozen = (await batchBackends(frozenId, true)) > 0;
      if (!frozen) a.child.kill('SIGCONT');
    }
    assert.ok(frozen, 'the relay frozen with a batch open');

    // A statement the frozen relay sent just before the signal may still wait in PgBouncer
    // for a server connection, and open one more transaction once it gets one: the count
    // to compare is the most open at once until the survivor fences them.
    await waitFor(
      'the survivor to own every shard',
      async () => {
        openBatches = Math.max(openBatches, await batchBackends(frozenId));
        return (await live()).map((r) => r.shardCount).join() === '256';
      },
      { timeoutMs: 30_000, intervalMs: 20 },
    );
    await waitFor('the frozen batch terminated', async () => (await batchBackends(frozenId)) === 0, { timeoutMs: 10_000 });
    const survivor = b;
    const aboutFrozen = (): Array<{ msg?: string; survivors?: number; connectionsTerminated?: number }> =>
      survivor
        .output()
        .split('\n')
        .flatMap((line) => {
          try {
            const l = JSON.parse(line) as { msg?: string; staleRelay?: string; survivors?: number; connectionsTerminated?: number };
            return l.staleRelay === frozenId ? [l] : [];
          } catch {
            return [];
          }
        });
    await waitFor('the survivor to log the takeover', () => aboutFrozen().some((l) => l.msg === 'took over shards of a relay whose lease expired'), { timeoutMs: 10_000 }).catch((error: Error) => {
      throw new Error(`${error.message}\n${survivor.output().slice(-2000)}`);
    });
    // The frozen relay's open batches and nothing else, counted over every round of the
    // takeover (a backend may take longer to exit than the survivor waits in one round).
    const tookOver = aboutFrozen().filter((l) => l.msg === 'took over shards of a relay whose lease expired');
    assert.deepEqual(tookOver.map((l) => l.connectionsTerminated), [openBatches], `the frozen relay's ${openBatches} open batch(es): ${JSON.stringify(aboutFrozen())}`);
    for (const l of aboutFrozen()) assert.ok((l.survivors ?? 0) <= openBatches, `only the frozen batches: ${JSON.stringify(l)}`);

    // The writers went through the same PgBouncer the whole time: none of their
    // transactions was terminated (runWriters fails on the first error).
    const { committed, rolledBack } = await writing;
    a.child.kill('SIGCONT');
    await waitFor('every committed row marked sent', async () => (await sentCount(db, topic)) === committed.size, { timeoutMs: 60_000 });
    await assertDeliveredInOrder(topic, committed, rolledBack);
  } finally {
    a.child.kill('SIGCONT');
    a.child.kill('SIGTERM');
    b?.child.kill('SIGTERM');
    await writing?.catch(() => undefined);
    await a.exited;
    if (b) await b.exited;
  }
});
