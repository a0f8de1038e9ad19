import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createRelay, type Relay } from '../src/relay/relay.js';
import { FLOOR_RESCAN_MS, type ClaimFloor } from '../src/relay/floor.js';
import { replayDeadLetters, discardDeadLetters } from '../src/commands/deadLetters.js';
import { enqueue, type OutboxMessage } from '../src/enqueue.js';
import { HEADERS } from '../src/shared/kafka.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, readTopic, testBrokers, type ReadMessage } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { writeCommitted } from './helpers/outbox.js';
import { leaseShards } from './helpers/leases.js';
import { LowWaterMark } from '../src/relay/lowWater.js';
import { BATCH_SETTINGS_SQL, claimSql } from '../src/relay/sql/claim.js';

// Claims start past what a worker has dealt with (src/relay/floor.ts). These are the
// ways rows come back below that floor; each must still go out, in order per key.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('floors');
});
after(async () => {
  await db.drop();
});

const write = (messages: OutboxMessage[]): Promise<number[]> => writeCommitted(db, messages);

const floorsOf = (relay: Relay): number[] => [...(relay as unknown as { floors: Map<unknown, ClaimFloor> }).floors.values()].map((f) => f.floor);

function idsOfKey(messages: ReadMessage[], key: string): number[] {
  const ids = messages.filter((m) => m.key === key).map((m) => Number(m.headers[HEADERS.outboxId]));
  return ids.filter((id, i) => ids.indexOf(id) === i); // first deliveries
}

/** Park key `p` behind an oversized row, then publish enough other rows that every worker's floor passes it. */
async function parkThenPass(topic: string, relay: Relay): Promise<{ poison: number; held: number[] }> {
  const [before, poison, ...held] = await write([
    { topic, key: 'p', payload: { n: 0 } },
    { topic, key: 'p', payload: { pad: 'x'.repeat(3_000) } },
    { topic, key: 'p', payload: { n: 2 } },
    { topic, key: 'p', payload: { n: 3 } },
  ]);
  await waitFor('p parked', async () => (await db.pool.query(`SELECT 1 FROM "${db.schema}".outbox_parked_keys WHERE key = 'p'`)).rowCount);
  const others = await write(Array.from({ length: 300 }, (_, i) => ({ topic, key: `o${i % 50}`, payload: { i } })));
  await waitFor('the other keys published', async () => {
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE id = ANY($1) AND sent_at IS NULL`, [others]);
    return rows[0]!.n === 0;
  });
  await waitFor('every floor past the parked rows', () => floorsOf(relay).every((f) => f > held[held.length - 1]!));
  assert.ok(before! < poison!);
  return { poison: poison!, held };
}

test('integration: a replayed dead letter comes back under its old id, below every floor, and goes out before its key\'s waiting rows', async () => {
  const topic = await createTopic(2);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20, maxMessageBytes: 2_048 });
  await relay.start();
  try {
    const { poison, held } = await parkThenPass(topic, relay);
    // The operator shrinks the row and replays it.
    await db.pool.query(`UPDATE "${db.schema}".outbox_dead_letters SET payload = '{"n":1}' WHERE id = $1`, [poison]);
    const replay = await replayDeadLetters({ databaseUrl: db.databaseUrl, schema: db.schema, ids: [poison], rate: 1000 });
    assert.equal(replay.replayed, 1);
    const [after] = await write([{ topic, key: 'p', payload: { n: 4 } }]);
    const messages = await readTopic(topic, (m) => idsOfKey(m, 'p').length >= 5);
    assert.deepEqual(idsOfKey(messages, 'p').slice(1), [poison, ...held, after], "p's rows in id order, the replayed one first");
  } finally {
    await relay.stop();
  }
});

test('integration: a discarded dead letter releases its key; the held rows, below every floor, go out before the key\'s new rows', async () => {
  const topic = await createTopic(2);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20, maxMessageBytes: 2_048 });
  await relay.start();
  try {
    const { poison, held } = await parkThenPass(topic, relay);
    const discarded = await discardDeadLetters({ databaseUrl: db.databaseUrl, schema: db.schema, ids: [poison], yes: true });
    assert.equal(discarded.discarded, 1);
    const [after] = await write([{ topic, key: 'p', payload: { n: 4 } }]);
    const messages = await readTopic(topic, (m) => idsOfKey(m, 'p').length >= 4);
    assert.deepEqual(idsOfKey(messages, 'p').slice(1), [...held, after]);
  } finally {
    await relay.stop();
  }
});

test('integration: after a forced horizon release, a row whose transaction commits late below the watermark is still found (the floor waits for it)', async () => {
  const topic = await createTopic(2);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20, horizonMaxWaitMs: 300 });
  let forced = 0;
  relay.on('horizon', (h) => {
    if (h.forced) forced++;
  });
  await relay.start();
  const late = await db.pool.connect();
  try {
    await late.query('BEGIN');
    const [lateId] = await enqueue(late, [{ topic, key: 'late', payload: { n: 1 } }], { schema: db.schema });
    const others = await write(Array.from({ length: 300 }, (_, i) => ({ topic, key: `o${i % 50}`, payload: { i } })));
    await readTopic(topic, (m) => m.length >= others.length);
    assert.ok(forced > 0, 'the horizon was released by force past the open transaction');
    assert.ok(relay.watermark >= others[others.length - 1]!);
    assert.ok(floorsOf(relay).every((f) => f < (lateId!.id as number)), `floors ${floorsOf(relay)} stay below the open row ${lateId!.id}`);
    await late.query('COMMIT');
    const messages = await readTopic(topic, (m) => m.some((x) => x.key === 'late'));
    assert.deepEqual(idsOfKey(messages, 'late'), [lateId!.id]);
  } finally {
    late.release();
    await relay.stop();
  }
});

test("integration: the low-water mark stops at the first row that may still need publishing, one another session holds locked included; passes a parked key's rows; stays at or below the settled id; walks from the lowest id again once the generation moved", async () => {
  const lw = await createTestSchema('lowwater');
  const s = `"${lw.schema}"`;
  const locker = await lw.pool.connect();
  try {
    const ids = await writeCommitted(lw, Array.from({ length: 10 }, (_, i) => ({ topic: 't', key: `k${i}`, payload: { i } })));
    await lw.pool.query(`UPDATE ${s}.outbox SET sent_at = now() WHERE id = ANY($1) AND id <> $2`, [ids, ids[3]]);
    // A fenced relay's batch (or an operator) holds row 4: a claim skips it, the mark must not.
    await locker.query('BEGIN');
    await locker.query(`SELECT 1 FROM ${s}.outbox WHERE id = $1 FOR UPDATE`, [ids[3]]);
    const mark = new LowWaterMark(s);
    const find = async (settled: number, at: number): Promise<number | undefined> => (await mark.refresh(lw.pool, settled, 0, at, 1))?.id;
    assert.equal(await find(ids[9]!, 0), ids[3]! - 1, 'stops below the locked row');
    await locker.query(`UPDATE ${s}.outbox SET sent_at = now() WHERE id = $1`, [ids[3]]);
    await locker.query('COMMIT');
    assert.equal(await find(ids[9]!, 10), ids[9], 'nothing unsent: the settled id');

    const [p1, q, p2] = await writeCommitted(lw, [
      { topic: 't', key: 'p', payload: {} },
      { topic: 't', key: 'q', payload: {} },
      { topic: 't', key: 'p', payload: {} },
    ]);
    assert.equal(await find(ids[9]!, 20), ids[9], 'rows above the settled id are not looked at (their transactions may still be open)');
    await lw.pool.query(`INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id) VALUES ('t', 'p', 0)`);
    assert.equal(await find(p2!, 30), q! - 1, "p's rows passed (parked), q's stops it");
    await lw.pool.query(`UPDATE ${s}.outbox SET sent_at = now() WHERE id = $1`, [q]);
    assert.equal(await find(p2!, 40), p2, 'only parked rows left');

    // A row back below the mark without a generation bump is not looked for (nothing of ours
    // does that); with one (what a replay does), the walk starts from the lowest id.
    await lw.pool.query(`UPDATE ${s}.outbox SET sent_at = NULL WHERE id = $1`, [ids[1]]);
    assert.equal(await find(p2!, 50), p2);
    await lw.pool.query(`UPDATE ${s}.outbox_claim_floors SET generation = generation + 1`);
    const { rows: gen } = await lw.pool.query<{ g: string }>(`SELECT generation::text AS g FROM ${s}.outbox_claim_floors`);
    assert.deepEqual(await mark.refresh(lw.pool, p2!, 0, 60, 1), { id: ids[1]! - 1, generation: gen[0]!.g, horizonResets: 0 });
    assert.equal(mark.current(1), undefined, 'a mark of an earlier horizon (a restart) holds for no other');
    assert.equal((await mark.refresh(lw.pool, p2!, 0, 61, 1_000))!.id, ids[1]! - 1, 'found less than maxAgeMs ago: as it is');
  } finally {
    await locker.query('ROLLBACK').catch(() => undefined);
    locker.release();
    await lw.drop();
  }
});

test('integration: under a snapshot held open elsewhere, a claim that starts over at the low-water mark reads the index entries published since the mark, not every one the snapshot keeps', async () => {
  const lw = await createTestSchema('lowwaterheld');
  const s = `"${lw.schema}"`;
  const relayId = 'low-water-relay';
  await leaseShards(lw.pool, lw.schema, relayId);
  const holder = await lw.pool.connect();
  const claimer = await lw.pool.connect();
  try {
    const write = (n: number) => lw.pool.query(`INSERT INTO ${s}.outbox (topic, key, payload) SELECT 't', 'k' || (g % 100), '{}' FROM generate_series(1, $1::int) AS g`, [n]);
    await write(20_000);
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1'); // the snapshot: no version written from here on can be removed
    await lw.pool.query(`UPDATE ${s}.outbox SET sent_at = now()`); // published under the hold
    await write(600);
    const { rows: top } = await lw.pool.query<{ max: string; started: string }>(
      `SELECT max(id)::text AS max, pg_postmaster_start_time()::text AS started FROM ${s}.outbox`,
    );
    const settled = Number(top[0]!.max);
    const mark = await new LowWaterMark(s).refresh(lw.pool, settled, 0, 0, 1);
    assert.equal(mark!.id, settled - 600, 'the mark: below the first unsent row');
    // Index entries the claim read (pg_stat_user_indexes.idx_tup_read, flushed after it):
    // each one of a row published under the hold is read, and its heap tuple checked.
    const entriesRead = async (): Promise<number> => {
      const { rows } = await claimer.query<{ n: string }>(`SELECT idx_tup_read::text AS n FROM pg_stat_user_indexes WHERE indexrelid = '${s}.outbox_unsent_idx'::regclass`);
      return Number(rows[0]!.n);
    };
    const claimFrom = async (floor: number, generation: string): Promise<{ entries: number; rows: number }> => {
      const before = await entriesRead();
      await claimer.query('BEGIN');
      await claimer.query(BATCH_SETTINGS_SQL);
      const { rows } = await claimer.query(claimSql(s), [settled, Array.from({ length: 256 }, (_, i) => i), 500, relayId, top[0]!.started, floor, generation]);
      await claimer.query('ROLLBACK');
      await claimer.query('SELECT pg_stat_force_next_flush()'); // flushed as the session goes idle
      return { entries: (await entriesRead()) - before, rows: rows.length };
    };
    const fromZero = await claimFrom(0, '-1');
    const fromMark = await claimFrom(mark!.id, mark!.generation);
    console.log(`measured: a claim of 500 rows under a held snapshot keeping 20,000 published rows read ${fromZero.entries} index entries from the lowest id, ${fromMark.entries} from the low-water mark`);
    assert.equal(fromZero.rows, 500);
    assert.equal(fromMark.rows, 500, 'the same batch');
    assert.ok(fromZero.entries >= 20_500, `from the lowest id: every kept entry (${fromZero.entries})`);
    assert.ok(fromMark.entries <= 600, `from the mark: the batch's own (${fromMark.entries})`);
  } finally {
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    claimer.release();
    await lw.drop();
  }
});

test('integration: under a snapshot held open elsewhere, a relay\'s rescans start at the low-water mark: across its run the index entries the snapshot keeps are walked once (the mark\'s first walk), not once per worker per rescan', async () => {
  const lw = await createTestSchema('lowwaterrelay');
  const s = `"${lw.schema}"`;
  const topic = await createTopic(2);
  const holder = await lw.pool.connect();
  const KEPT = 20_000;
  let relay: Relay | undefined;
  try {
    await lw.pool.query(`INSERT INTO ${s}.outbox (topic, key, payload) SELECT $1, 'k' || (g % 100), '{}' FROM generate_series(1, $2::int) AS g`, [topic, KEPT]);
    await holder.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await holder.query('SELECT 1'); // the snapshot: the index keeps an entry for each row published from here on
    await lw.pool.query(`UPDATE ${s}.outbox SET sent_at = now()`);
    const fresh = await writeCommitted(lw, Array.from({ length: 40 }, (_, i) => ({ topic, key: `f${i % 8}`, payload: { i } })));
    const entriesRead = async (): Promise<number> => {
      const { rows } = await lw.pool.query<{ n: string }>(`SELECT idx_tup_read::text AS n FROM pg_stat_user_indexes WHERE indexrelid = '${s}.outbox_unsent_idx'::regclass`);
      return Number(rows[0]!.n);
    };
    const before = await entriesRead();
    relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: lw.databaseUrl, kafkaBrokers: testBrokers(), schema: lw.schema, batchSize: 20 });
    await relay.start();
    const r = relay;
    await readTopic(topic, (m) => m.length >= fresh.length);
    // Every worker's floor starts over at its first claim and then at each rescan
    // (FLOOR_RESCAN_MS at the least); from 0, each would walk all KEPT entries again.
    const startOvers = new Map<ClaimFloor, Set<number>>();
    await waitFor(
      'every floor started over twice (its first claim and a rescan)',
      () => {
        for (const f of (r as unknown as { floors: Map<unknown, ClaimFloor> }).floors.values()) {
          if (!startOvers.has(f)) startOvers.set(f, new Set());
          if (f.startedOverAtMs > 0) startOvers.get(f)!.add(f.startedOverAtMs);
        }
        return startOvers.size > 0 && [...startOvers.values()].every((set) => set.size >= 2);
      },
      { timeoutMs: 4 * FLOOR_RESCAN_MS + 30_000 },
    );
    const { applicationName } = relay;
    await relay.stop();
    relay = undefined;
    // A backend's statistics are flushed when it exits: read them once the relay's are gone.
    await waitFor('the relay\'s backends gone', async () => {
      const { rows } = await lw.pool.query(`SELECT 1 FROM pg_stat_activity WHERE starts_with(application_name, $1)`, [applicationName]);
      return rows.length === 0;
    });
    await lw.pool.query('SELECT pg_stat_clear_snapshot()');
    const read = (await entriesRead()) - before;
    const starts = [...startOvers.values()].reduce((n, set) => n + set.size, 0);
    console.log(`measured: ${startOvers.size} workers started their floors over ${starts} times under a snapshot keeping ${KEPT} index entries; the relay read ${read} entries of the unsent-row index in all`);
    assert.ok(read >= KEPT, `the mark's first walk passes every kept entry once (${read})`);
    assert.ok(read < 1.5 * KEPT, `${starts} start-overs read ${read} entries: the rescans walked from the mark, not from 0 (${starts * KEPT} if they had)`);
  } finally {
    await relay?.stop();
    await holder.query('ROLLBACK').catch(() => undefined);
    holder.release();
    await lw.drop();
  }
});

test('integration: a row another session held locked while the relay drained past it goes out once the lock ends, at the next rescan (the floor starts over at the low-water mark, which stayed below it)', async () => {
  const topic = await createTopic(2);
  const [lockedId] = await write([{ topic, key: 'locked', payload: { n: 1 } }]);
  const locker = await db.pool.connect();
  await locker.query('BEGIN');
  await locker.query(`SELECT 1 FROM "${db.schema}".outbox WHERE id = $1 FOR UPDATE`, [lockedId]);
  const relay = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema, batchSize: 20 });
  await relay.start();
  try {
    const others = await write(Array.from({ length: 300 }, (_, i) => ({ topic, key: `o${i % 50}`, payload: { i } })));
    await readTopic(topic, (m) => m.length >= others.length);
    await waitFor('every floor past the locked row', () => floorsOf(relay).every((f) => f > lockedId!));
    const { rows } = await db.pool.query(`SELECT sent_at FROM "${db.schema}".outbox WHERE id = $1`, [lockedId]);
    assert.equal(rows[0]!.sent_at, null, 'skipped while locked');
    await locker.query('COMMIT');
    const released = performance.now();
    const messages = await readTopic(topic, (m) => m.some((x) => x.key === 'locked'));
    const waitedMs = performance.now() - released;
    console.log(`measured: the row went out ${Math.round(waitedMs)} ms after its lock ended (FLOOR_RESCAN_MS ${FLOOR_RESCAN_MS})`);
    assert.deepEqual(idsOfKey(messages, 'locked'), [lockedId]);
    // The rescan falls due FLOOR_RESCAN_MS after the last; an idle worker claims at least
    // that often (workerLoop.ts, RECHECK_MAX_MS): at most two intervals.
    assert.ok(waitedMs < 2 * FLOOR_RESCAN_MS + 5_000, `out within two rescan intervals (${Math.round(waitedMs)} ms)`);
  } finally {
    await locker.query('ROLLBACK').catch(() => undefined);
    locker.release();
    await relay.stop();
  }
});
