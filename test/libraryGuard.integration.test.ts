import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers } from './helpers/kafka.js';
import { sentCount, writeCommitted } from './helpers/outbox.js';
import { spawnTs, type Spawned } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { HEADERS } from '../src/shared/kafka.js';

// No client library's throw ends the relay (src/shared/libraryGuard.ts). Each case runs a
// relay process (test/helpers/libraryFaultRelay.ts) on the real broker and Postgres with
// one library call broken: the call never settles and the library's own code throws from
// a callback, outside any promise, as @platformatic/kafka 1.35 did after a broker bounce.
// Without the guard the process dies of the uncaughtException. With it: the process lives,
// the throw is logged once and counted, the call in flight fails as transient and is
// retried, and every row is published. The admin case is that bug's own trigger (the
// admin's cached broker list lacks the group coordinator): 1.35's connection pool threw a
// TypeError from it; 2.x (since 2.3.1) answers the call with an error instead, which the
// progress read retries like any failed call, so the case now checks that nothing is thrown.

const ROWS = 300;
const CONTAINED = 'a client library threw from its own callback';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('libguard');
});
after(async () => {
  await db.drop();
});

interface Line {
  msg?: string;
  library?: string;
  stack?: string;
  libfault?: boolean;
  injected?: string;
  inFlight?: number;
  cachedBrokers?: number;
  counted?: number;
  answered?: 'resolved' | 'rejected';
  error?: string;
}

function lines(relay: Spawned): Line[] {
  return relay
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line);
}

async function runCase(
  fault: 'send' | 'commit' | 'admin' | 'metadata' | 'pg',
  delivery: 'at-least-once' | 'exactly-once',
  library: string,
  at = 2,
  libraryThrows = true,
): Promise<{ logged: Line[]; faultLines: Line[] }> {
  const topic = await createTopic(3);
  const ids = await writeCommitted(db, Array.from({ length: ROWS }, (_, i) => ({ topic, key: `k${i % 23}`, payload: { i } })));
  const relay = spawnTs('test/helpers/libraryFaultRelay.ts', [], {
    LIBFAULT: fault,
    LIBFAULT_AT: String(at),
    DATABASE_URL: db.databaseUrl,
    OUTBOX_SCHEMA: db.schema,
    KAFKA_BROKERS: testBrokers().join(','),
    OUTBOX_DELIVERY: delivery,
    OUTBOX_PRODUCER: TEST_PRODUCER,
    OUTBOX_TRANSACTIONAL_ID_PREFIX: uniqueName('libguard'),
  });
  const died = relay.exited.then((code) => {
    throw new Error(`the relay process exited (${code}):\n${relay.output().slice(-3000)}`);
  });
  died.catch(() => undefined);
  try {
    const watch = <T>(what: string, check: () => Promise<T | undefined | false> | T | undefined | false): Promise<T> =>
      Promise.race([waitFor(what, check, { timeoutMs: 120_000, intervalMs: 100 }), died]);
    // The precondition: the fault was injected, and the library threw.
    const injected = await watch('the fault injected', () => lines(relay).find((l) => l.libfault && l.injected));
    if (fault === 'admin') assert.ok(injected.cachedBrokers! > 0, 'the admin had a broker list to empty');
    else assert.ok(injected.inFlight! >= 1, 'the broken call was in flight, guarded');
    if (libraryThrows) await watch('the throw counted', () => lines(relay).find((l) => l.libfault && l.counted !== undefined));
    await watch('every row sent', async () => (await sentCount(db, topic)) === ids.length);
    assert.equal(relay.child.exitCode, null, 'the relay process lives');
    const logged = lines(relay).filter((l) => l.msg?.startsWith(CONTAINED));
    if (libraryThrows) {
      const counted = Math.max(...lines(relay).flatMap((l) => (l.libfault && l.counted !== undefined ? [l.counted] : [])));
      assert.ok(logged.length >= 1, 'the throw was logged');
      assert.equal(logged.length, counted, 'each throw logged once, and counted');
      for (const l of logged) assert.equal(l.library, library);
    } else {
      assert.deepEqual(logged, [], 'nothing thrown from a library callback');
    }
    const outboxIds = (m: { headers: Record<string, string> }[]): Set<number> => new Set(m.map((x) => Number(x.headers[HEADERS.outboxId])));
    const published = outboxIds(await readTopic(topic, (m) => outboxIds(m).size >= ids.length));
    assert.deepEqual([...published].sort((a, b) => a - b), ids, 'every row on the topic');
    return { logged, faultLines: lines(relay).filter((l) => l.libfault) };
  } finally {
    relay.child.kill('SIGTERM');
    await relay.exited;
  }
}

test('integration: library guard: at-least-once: a throw from the producer adapter\'s send callbacks is contained, retried, nothing lost', async () => {
  const { logged } = await runCase('send', 'at-least-once', TEST_PRODUCER === 'kafkajs' ? 'kafkajs' : '@platformatic/kafka');
  assert.equal(logged.length, 1);
});

test('integration: library guard: at-least-once: a throw from pg\'s callbacks during a query is contained, retried, nothing lost', async () => {
  const { logged } = await runCase('pg', 'at-least-once', 'pg');
  assert.equal(logged.length, 1);
});

test('integration: library guard: at-least-once: a throw from the adapter\'s callbacks while it reads a topic\'s partitions (its admin or metadata request) is contained, retried, nothing lost', async () => {
  const { logged } = await runCase('metadata', 'at-least-once', TEST_PRODUCER === 'kafkajs' ? 'kafkajs' : '@platformatic/kafka', 1);
  assert.equal(logged.length, 1);
});

test('integration: library guard: exactly-once: @platformatic/kafka 2.x answers the broker-bounce case (its admin\'s cached broker list lacks the group coordinator) with an error of the call, not a TypeError thrown from its connection pool; every row published', async (t) => {
  const { faultLines } = await runCase('admin', 'exactly-once', '@platformatic/kafka', 2, false);
  const answer = faultLines.find((l) => l.answered);
  assert.ok(answer, 'the broken call was answered (1.35 threw instead, and the call never settled)');
  t.diagnostic(`the broken call was ${answer.answered}${answer.error ? `: ${answer.error}` : ''}`);
  // Rejected (the relay reads again) or resolved after the library refreshed its metadata: either is a call's answer.
  if (answer.answered === 'rejected') assert.doesNotMatch(answer.error ?? '', /^TypeError/, 'the library\'s own error, not a TypeError');
});

test('integration: library guard: exactly-once: a throw from the client\'s callbacks during a transaction\'s send is contained, retried, nothing lost', async () => {
  const { logged } = await runCase('send', 'exactly-once', TEST_PRODUCER === 'kafkajs' ? 'kafkajs' : '@platformatic/kafka');
  assert.equal(logged.length, 1);
});

test('integration: library guard: exactly-once: a throw from the client\'s callbacks during a transaction\'s commit is contained, retried, nothing lost', async () => {
  const { logged } = await runCase('commit', 'exactly-once', TEST_PRODUCER === 'kafkajs' ? 'kafkajs' : '@platformatic/kafka');
  assert.equal(logged.length, 1);
});

test('integration: library guard: exactly-once: a throw from pg\'s callbacks during a query is contained, retried, nothing lost', async () => {
  const { logged } = await runCase('pg', 'exactly-once', 'pg');
  assert.equal(logged.length, 1);
});
