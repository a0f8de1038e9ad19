import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import {
  discardDeadLetters,
  listDeadLetters,
  replayDeadLetters,
  type ReplayProgress,
} from '../src/commands/deadLetters.js';
import { DeadLetterNotFoundError } from '../src/commands/deadLetterSelection.js';
import { ConfigError } from '../src/shared/errors.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';

// Dead letters are made here the way the relay makes them: an outbox id from the sequence,
// the row moved whole into outbox_dead_letters, and for policy park a row in
// outbox_parked_keys; the key's later rows wait in the outbox.

let db: TestSchema;
before(async () => {
  db = await createTestSchema('deadletters');
});
after(async () => {
  await db.drop();
});

const T = (table: string): string => `"${db.schema}".${table}`;

interface Made {
  id: number;
  messageId: string;
  topic: string;
  key: string;
}

async function reset(): Promise<void> {
  await db.pool.query(`TRUNCATE ${T('outbox')}, ${T('outbox_dead_letters')}, ${T('outbox_parked_keys')}`);
}

async function makeDeadLetter(d: {
  topic?: string;
  key: string;
  policy?: 'park' | 'skip';
  reason?: string;
  errorName?: string;
  ago?: string;
  dedupKey?: string;
  payload?: unknown;
}): Promise<Made> {
  const topic = d.topic ?? 'orders';
  const policy = d.policy ?? 'park';
  const { rows } = await db.pool.query<{ id: number; message_id: string }>(
    `INSERT INTO ${T('outbox_dead_letters')}
       (id, message_id, topic, key, payload, headers, created_at, dedup_key, attempts, reason, error_name, policy, first_failed_at, dead_lettered_at)
     VALUES (nextval('${db.schema}.outbox_id_seq'), gen_random_uuid(), $1, $2, $3, '{"traceparent":"00-abc-def-01"}',
             now() - $7::interval - interval '1 minute', $4, 3, $5, $6, $8, now() - $7::interval, now() - $7::interval)
     RETURNING id, message_id`,
    [topic, d.key, JSON.stringify(d.payload ?? { key: d.key }), d.dedupKey ?? null, d.reason ?? 'message of 5000 bytes exceeds max.message.bytes 2000', d.errorName ?? 'MESSAGE_TOO_LARGE', d.ago ?? '0 seconds', policy],
  );
  const id = Number(rows[0]!.id);
  if (policy === 'park') {
    await db.pool.query(`INSERT INTO ${T('outbox_parked_keys')} (topic, key, dead_letter_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [topic, d.key, id]);
  }
  return { id, messageId: rows[0]!.message_id, topic, key: d.key };
}

/** A pending row in the outbox (a key's later row, waiting behind its parked dead letter). */
async function pendingRow(key: string, topic = 'orders'): Promise<number> {
  const { rows } = await db.pool.query<{ id: number }>(`INSERT INTO ${T('outbox')} (topic, key, payload) VALUES ($1, $2, '{}') RETURNING id`, [topic, key]);
  return Number(rows[0]!.id);
}

/** Everything in the three tables, to show a refused command changed nothing. */
async function snapshot(): Promise<unknown> {
  const q = async (sql: string) => (await db.pool.query(sql)).rows;
  return {
    outbox: await q(`SELECT * FROM ${T('outbox')} ORDER BY id`),
    deadLetters: await q(`SELECT * FROM ${T('outbox_dead_letters')} ORDER BY id`),
    parked: await q(`SELECT * FROM ${T('outbox_parked_keys')} ORDER BY topic, key`),
  };
}

async function parkedKeys(): Promise<Array<{ topic: string; key: string; dead_letter_id: number }>> {
  return (await db.pool.query(`SELECT topic, key, dead_letter_id FROM ${T('outbox_parked_keys')} ORDER BY topic, key`)).rows.map((r) => ({ ...r, dead_letter_id: Number(r.dead_letter_id) }));
}

async function deadLetterIds(): Promise<number[]> {
  return (await db.pool.query(`SELECT id FROM ${T('outbox_dead_letters')} ORDER BY id`)).rows.map((r) => Number(r.id));
}

const conn = () => ({ pool: db.pool, schema: db.schema });

// ---------------------------------------------------------------------------------------
// list

test('integration: list filters by ids, topic, key, reason or error name (substring, any case), time range and policy', async () => {
  await reset();
  const a1 = await makeDeadLetter({ key: 'a', ago: '3 hours' });
  const b1 = await makeDeadLetter({ key: 'b', policy: 'skip', reason: 'payload is not valid JSON: Unexpected token', errorName: 'validation:payload_json', ago: '90 minutes' });
  const c1 = await makeDeadLetter({ topic: 'payments', key: 'c', reason: 'Topic authorization failed', errorName: 'TOPIC_AUTHORIZATION_FAILED', ago: '10 minutes' });
  const a2 = await makeDeadLetter({ key: 'a', policy: 'skip', ago: '1 minute' });
  const ids = async (filter: Parameters<typeof listDeadLetters>[0]) => (await listDeadLetters({ ...conn(), ...filter })).deadLetters.map((d) => d.id);

  assert.deepEqual(await ids({}), [a1.id, b1.id, c1.id, a2.id], 'all, lowest id first');
  assert.deepEqual(await ids({ ids: [c1.id, a1.id] }), [a1.id, c1.id]);
  assert.deepEqual(await ids({ topic: 'payments' }), [c1.id]);
  assert.deepEqual(await ids({ key: 'a' }), [a1.id, a2.id]);
  assert.deepEqual(await ids({ topic: 'orders', key: 'a', policy: 'skip' }), [a2.id]);
  assert.deepEqual(await ids({ reason: 'MAX.MESSAGE' }), [a1.id, a2.id], 'reason substring, case-insensitive');
  assert.deepEqual(await ids({ reason: 'authorization' }), [c1.id]);
  assert.deepEqual(await ids({ reason: 'validation:' }), [b1.id], 'or the error name');
  assert.deepEqual(await ids({ reason: '%' }), [], '% is a character, not a wildcard');
  assert.deepEqual(await ids({ since: '2h' }), [b1.id, c1.id, a2.id]);
  assert.deepEqual(await ids({ since: '2h', until: '5m' }), [b1.id, c1.id]);
  assert.deepEqual(await ids({ until: new Date(Date.now() - 2 * 3_600_000) }), [a1.id]);
  const iso = new Date(Date.now() - 30 * 60_000).toISOString();
  assert.deepEqual(await ids({ since: iso }), [c1.id, a2.id], 'ISO time');
  assert.deepEqual(await ids({ key: 'nobody' }), [], 'list: no match is an empty list, not an error');

  const limited = await listDeadLetters({ ...conn(), limit: 2 });
  assert.deepEqual(limited.deadLetters.map((d) => d.id), [a1.id, b1.id]);
  assert.equal(limited.total, 4, 'total counts every match beyond the limit');

  const [first] = (await listDeadLetters({ ...conn(), ids: [a1.id] })).deadLetters;
  assert.equal(first!.parksKey, true, 'a1 parks key a');
  assert.equal(first!.messageId, a1.messageId);
  assert.deepEqual(first!.payload, { key: 'a' });
  assert.deepEqual(first!.headers, { traceparent: '00-abc-def-01' });
  assert.equal(first!.attempts, 3);
  assert.equal(first!.errorName, 'MESSAGE_TOO_LARGE');
  assert.equal((await listDeadLetters({ ...conn(), ids: [a2.id] })).deadLetters[0]!.parksKey, false);
});

test('integration: list refuses bad filters, naming the option', async () => {
  const bad: Array<[Record<string, unknown>, string]> = [
    [{ since: 'yesterday' }, 'since'],
    [{ until: '2024-02-30' }, 'until'],
    [{ since: '1h', until: '2h' }, 'until'],
    [{ ids: [] }, 'ids'],
    [{ ids: [0] }, 'ids'],
    [{ ids: [1.5] }, 'ids'],
    [{ topic: '' }, 'topic'],
    [{ policy: 'drop' }, 'policy'],
    [{ limit: 0 }, 'limit'],
    [{ schema: 'x"; drop table y; --' }, 'schema'],
  ];
  for (const [options, setting] of bad) {
    await assert.rejects(listDeadLetters({ ...conn(), ...options }), (e: unknown) => e instanceof ConfigError && e.setting === setting, JSON.stringify(options));
  }
});

// ---------------------------------------------------------------------------------------
// replay

test('integration: replay moves a dead letter back whole, under its id and message id, as a new pending row', async () => {
  await reset();
  const d = await makeDeadLetter({ key: 'a', dedupKey: 'a:created:v1', payload: { amount: 12 } });
  const before = (await db.pool.query(`SELECT * FROM ${T('outbox_dead_letters')} WHERE id = $1`, [d.id])).rows[0];
  const result = await replayDeadLetters({ ...conn(), ids: [d.id], rate: 100 });
  assert.equal(result.replayed, 1);
  assert.deepEqual(result.replayedIds, [d.id]);
  assert.deepEqual(await deadLetterIds(), []);
  const row = (await db.pool.query(`SELECT * FROM ${T('outbox')} WHERE id = $1`, [d.id])).rows[0];
  assert.ok(row, 'back in the outbox under its original id');
  assert.equal(row.message_id, d.messageId, 'same message id: consumers deduplicate the replay');
  for (const column of ['topic', 'key', 'payload', 'payload_bytes', 'headers', 'created_at', 'dedup_key']) {
    assert.deepEqual(row[column], before[column], column);
  }
  assert.equal(row.sent_at, null);
  assert.equal(row.attempts, 0);
  assert.equal(row.last_error, null);
});

test('integration: replay releases the parked key in the same transaction; the row goes before its key\'s waiting rows', async () => {
  await reset();
  const d = await makeDeadLetter({ key: 'a' });
  const waiting = [await pendingRow('a'), await pendingRow('a')];
  const other = await makeDeadLetter({ key: 'b' });
  const result = await replayDeadLetters({ ...conn(), ids: [d.id], rate: 100 });
  assert.deepEqual(result.releasedKeys, [{ topic: 'orders', key: 'a', deadLetterId: d.id }]);
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'b', dead_letter_id: other.id }], 'only key a released');
  // The relay claims unsent rows of unparked keys in id order: the replayed row comes first.
  const pending = (await db.pool.query(`SELECT id FROM ${T('outbox')} WHERE key = 'a' AND sent_at IS NULL ORDER BY id`)).rows.map((r) => Number(r.id));
  assert.deepEqual(pending, [d.id, ...waiting]);
});

test('integration: replay goes in id order, so in order within each key; a key still parked by another dead letter keeps its replayed rows waiting', async () => {
  await reset();
  // Key a: an older skipped row, then the one parking it. Key b interleaved. Key c parked by
  // a dead letter this replay does not touch.
  const a1 = await makeDeadLetter({ key: 'a', policy: 'skip' });
  const b1 = await makeDeadLetter({ key: 'b' });
  const cPark = await makeDeadLetter({ key: 'c' });
  const a2 = await makeDeadLetter({ key: 'a' });
  const c2 = await makeDeadLetter({ key: 'c', policy: 'skip' });
  const b2 = await makeDeadLetter({ key: 'b', policy: 'skip' });
  const events: ReplayProgress[] = [];
  const result = await replayDeadLetters({ ...conn(), ids: [b2.id, a2.id, c2.id, b1.id, a1.id], rate: 200, onProgress: (e) => events.push(e) });
  assert.deepEqual(events.map((e) => e.id), [a1.id, b1.id, a2.id, c2.id, b2.id], 'lowest id first');
  for (const key of ['a', 'b']) {
    const ofKey = events.filter((e) => e.key === key).map((e) => e.id);
    assert.deepEqual(ofKey, [...ofKey].sort((x, y) => x - y), `key ${key} in id order`);
  }
  assert.deepEqual(result.releasedKeys.map((k) => k.key).sort(), ['a', 'b']);
  assert.deepEqual(result.waiting, [{ id: c2.id, parkedBehind: cPark.id }]);
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'c', dead_letter_id: cPark.id }]);
  assert.deepEqual(await deadLetterIds(), [cPark.id]);
});

test('integration: a key with two park dead letters stays parked until the last of them leaves, so its waiting rows never overtake one', async () => {
  await reset();
  const d0 = await makeDeadLetter({ key: 'a' });
  const d1 = await makeDeadLetter({ key: 'a' }); // parked behind d0 already: the key's parking row stays d0
  const waiting = await pendingRow('a');
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'a', dead_letter_id: d0.id }]);

  const first = await replayDeadLetters({ ...conn(), ids: [d0.id], rate: 100 });
  assert.deepEqual(first.releasedKeys, []);
  assert.deepEqual(first.waiting, [{ id: d0.id, parkedBehind: d1.id }]);
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'a', dead_letter_id: d1.id }], 'handed on to d1');

  const dry = await discardDeadLetters({ ...conn(), ids: [d1.id] });
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'a', dead_letter_id: d1.id }], 'a dry run hands nothing on');
  assert.equal(dry.dryRun, true);
  const gone = await discardDeadLetters({ ...conn(), ids: [d1.id], yes: true });
  assert.deepEqual(gone.releasedKeys, [{ topic: 'orders', key: 'a', deadLetterId: d1.id }]);
  assert.deepEqual(await parkedKeys(), []);
  const pending = (await db.pool.query(`SELECT id FROM ${T('outbox')} WHERE sent_at IS NULL ORDER BY id`)).rows.map((r) => Number(r.id));
  assert.deepEqual(pending, [d0.id, waiting]);

  // Both in one replay: released once the second has moved, nothing reported waiting.
  await reset();
  const e0 = await makeDeadLetter({ key: 'b' });
  const e1 = await makeDeadLetter({ key: 'b' });
  const both = await replayDeadLetters({ ...conn(), key: 'b', rate: 100 });
  assert.deepEqual(both.replayedIds, [e0.id, e1.id]);
  assert.deepEqual(both.releasedKeys, [{ topic: 'orders', key: 'b', deadLetterId: e1.id }]);
  assert.deepEqual(both.waiting, []);
  assert.deepEqual(await parkedKeys(), []);
});

test('integration: a row can never be in neither table nor in both, at any instant of a replay', async () => {
  await reset();
  const made: Made[] = [];
  for (let i = 0; i < 40; i++) made.push(await makeDeadLetter({ key: `k${i % 5}`, policy: i < 5 ? 'park' : 'skip' }));
  const ids = made.map((d) => d.id);
  let done = false;
  const replay = replayDeadLetters({ ...conn(), all: true, rate: 200 }).finally(() => (done = true));
  const seen = new Set<string>();
  // One statement, one snapshot: both tables at the same instant.
  while (!done) {
    const { rows } = await db.pool.query<{ in_outbox: number; in_dead: number; both: number }>(
      `SELECT (SELECT count(*) FROM ${T('outbox')} WHERE id = ANY($1))::int AS in_outbox,
              (SELECT count(*) FROM ${T('outbox_dead_letters')} WHERE id = ANY($1))::int AS in_dead,
              (SELECT count(*) FROM ${T('outbox')} o JOIN ${T('outbox_dead_letters')} d USING (id) WHERE o.id = ANY($1))::int AS both`,
      [ids],
    );
    const r = rows[0]!;
    assert.equal(r.in_outbox + r.in_dead, ids.length, `every row in exactly one table (${JSON.stringify(r)})`);
    assert.equal(r.both, 0);
    seen.add(`${r.in_outbox}`);
  }
  assert.equal((await replay).replayed, 40);
  assert.ok(seen.size > 5, `observed the replay midway (${seen.size} states)`);
  assert.deepEqual(await parkedKeys(), []);
});

test('integration: a dead letter whose dedup key is back in the outbox stays a dead letter; nothing is lost', async () => {
  await reset();
  const d = await makeDeadLetter({ key: 'a', dedupKey: 'evt-1' });
  const d2 = await makeDeadLetter({ key: 'b', policy: 'skip' });
  // The application enqueued the event again after it was dead-lettered.
  await db.pool.query(`INSERT INTO ${T('outbox')} (topic, key, dedup_key) VALUES ('orders', 'a', 'evt-1')`);
  const result = await replayDeadLetters({ ...conn(), all: true, rate: 100 });
  assert.deepEqual(result.notMoved, [{ id: d.id, why: 'conflict' }]);
  assert.deepEqual(result.replayedIds, [d2.id]);
  assert.deepEqual(await deadLetterIds(), [d.id], 'left in place');
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'a', dead_letter_id: d.id }], 'its key stays parked');
});

test('integration: two replays racing over the same dead letters move each exactly once', async () => {
  await reset();
  for (let i = 0; i < 20; i++) await makeDeadLetter({ key: `k${i}` });
  const [x, y] = await Promise.all([replayDeadLetters({ ...conn(), all: true, rate: 500 }), replayDeadLetters({ ...conn(), all: true, rate: 500 })]);
  assert.equal(x.replayed + y.replayed, 20);
  assert.deepEqual([...x.replayedIds, ...y.replayedIds].sort(), [...new Set([...x.replayedIds, ...y.replayedIds])].sort());
  // Each row either was not selected by the later replay, or the loser reports it gone.
  assert.equal(x.notMoved.length + y.notMoved.length, x.selected + y.selected - 20);
  assert.ok([...x.notMoved, ...y.notMoved].every((n) => n.why === 'gone'));
  assert.equal((await db.pool.query(`SELECT count(*)::int AS n FROM ${T('outbox')}`)).rows[0].n, 20);
  assert.deepEqual(await deadLetterIds(), []);
});

test('integration: a replay at a set rate holds that rate within 10% (200 rows at 50/s)', async () => {
  await reset();
  const n = 200;
  const rate = 50;
  await db.pool.query(
    `INSERT INTO ${T('outbox_dead_letters')} (id, message_id, topic, key, created_at, attempts, reason, error_name, policy)
     SELECT nextval('${db.schema}.outbox_id_seq'), gen_random_uuid(), 'orders', 'k' || (g % 20), now(), 1, 'broker said no', 'UNKNOWN', 'skip'
       FROM generate_series(1, $1) AS g`,
    [n],
  );
  const moves: number[] = [];
  // An independent witness: the number of dead letters left, sampled from the database
  // every 100 ms while the replay runs (a sampling period, not a synchronisation).
  const samples: Array<{ t: number; left: number }> = [];
  let sampling = false;
  const sampler = setInterval(() => {
    if (sampling) return;
    sampling = true;
    void db.pool
      .query(`SELECT count(*)::int AS n FROM ${T('outbox_dead_letters')}`)
      .then(({ rows }) => samples.push({ t: Date.now(), left: rows[0].n }))
      .finally(() => (sampling = false));
  }, 100);
  const replay = replayDeadLetters({ ...conn(), all: true, rate, onProgress: (e) => e.moved && moves.push(e.atMs) }).finally(() => clearInterval(sampler));
  const result = await replay;
  assert.equal(result.replayed, n);
  assert.equal(moves.length, n);

  // 1. From the replay's own timestamps: the rate between the first move and the last.
  const achieved = ((n - 1) * 1000) / (moves.at(-1)! - moves[0]!);
  assert.ok(Math.abs(achieved - rate) <= rate * 0.1, `achieved ${achieved.toFixed(2)}/s, configured ${rate}/s`);
  assert.ok(Math.abs(result.ratePerSecond! - rate) <= rate * 0.1, `reported ${result.ratePerSecond}`);
  // 2. No burst: the replay makes up at most 100 ms of moves after a stall, so no second
  // *starts* more than rate + 10% (+1 at the window's edge) moves. Measured here by
  // completion times, which a loaded machine jitters by a few more: allow 20%.
  let worst = 0;
  for (let i = 0, j = 0; i < moves.length; i++) {
    while (moves[i]! - moves[j]! >= 1000) j++;
    worst = Math.max(worst, i - j + 1);
  }
  assert.ok(worst <= rate * 1.2, `busiest second had ${worst} moves`);
  // 3. From the database: least-squares slope of dead letters left over time, mid-replay.
  const mid = samples.filter((s) => s.left > 0 && s.left < n);
  assert.ok(mid.length >= 10, `enough samples (${mid.length})`);
  const mt = mid.reduce((a, s) => a + s.t, 0) / mid.length;
  const ml = mid.reduce((a, s) => a + s.left, 0) / mid.length;
  const slope = mid.reduce((a, s) => a + (s.t - mt) * (s.left - ml), 0) / mid.reduce((a, s) => a + (s.t - mt) ** 2, 0);
  const observed = -slope * 1000;
  assert.ok(Math.abs(observed - rate) <= rate * 0.1, `observed in the table ${observed.toFixed(2)}/s`);
  console.log(`replay rate: configured ${rate}/s, achieved ${achieved.toFixed(2)}/s (replay timestamps), ${observed.toFixed(2)}/s (table samples), busiest second ${worst}`);
});

test('integration: replay stops between rows when its signal fires; what moved stays moved', async () => {
  await reset();
  for (let i = 0; i < 50; i++) await makeDeadLetter({ key: `k${i}`, policy: 'skip' });
  const abort = new AbortController();
  let moved = 0;
  const result = await replayDeadLetters({ ...conn(), all: true, rate: 100, signal: abort.signal, onProgress: () => ++moved === 5 && abort.abort() });
  assert.equal(result.stopped, true);
  assert.equal(result.replayed, 5);
  assert.equal((await deadLetterIds()).length, 45);
});

test('integration: bad replay arguments are refused before anything moves', async () => {
  await reset();
  const d = await makeDeadLetter({ key: 'a' });
  await pendingRow('a');
  const before = await snapshot();
  const bad: Array<[Record<string, unknown>, (e: unknown) => boolean]> = [
    [{ ids: [d.id + 1000] }, (e) => e instanceof DeadLetterNotFoundError && /dead letter \d+ does not exist; nothing was replayed/.test((e as Error).message)],
    [{ ids: [d.id, d.id + 1000] }, (e) => e instanceof DeadLetterNotFoundError],
    [{ ids: [d.id], topic: 'payments' }, (e) => e instanceof DeadLetterNotFoundError && /or do not match the filter/.test((e as Error).message)],
    [{ reason: 'no such reason' }, (e) => e instanceof DeadLetterNotFoundError && /no dead letter matches reason ~ "no such reason"; nothing was replayed/.test((e as Error).message)],
    [{ ids: [d.id], rate: -1 }, (e) => e instanceof ConfigError && e.setting === 'rate'],
    [{ ids: [d.id], rate: 0 }, (e) => e instanceof ConfigError && e.setting === 'rate'],
    [{ since: '2 hours' }, (e) => e instanceof ConfigError && e.setting === 'since'],
    [{}, (e) => e instanceof ConfigError && e.setting === 'filter'],
    [{ all: true, key: 'a' }, (e) => e instanceof ConfigError && e.setting === 'all'],
    [{ ids: [d.id], limit: 0 }, (e) => e instanceof ConfigError && e.setting === 'limit'],
  ];
  for (const [options, check] of bad) {
    await assert.rejects(replayDeadLetters({ ...conn(), ...options }), check, JSON.stringify(options));
  }
  assert.deepEqual(await snapshot(), before, 'nothing changed');
});

// ---------------------------------------------------------------------------------------
// discard

test('integration: discard without yes changes nothing and says what it would delete; with yes it deletes and releases the key', async () => {
  await reset();
  const a = await makeDeadLetter({ key: 'a' });
  const waiting = await pendingRow('a');
  const b = await makeDeadLetter({ key: 'b', reason: 'something else', errorName: 'OTHER' });
  const before = await snapshot();
  const dry = await discardDeadLetters({ ...conn(), reason: 'max.message.bytes' });
  assert.equal(dry.dryRun, true);
  assert.equal(dry.discarded, 0);
  assert.deepEqual(dry.matched.map((d) => d.id), [a.id]);
  assert.deepEqual(await snapshot(), before, 'without yes nothing changed');

  const done = await discardDeadLetters({ ...conn(), reason: 'max.message.bytes', yes: true });
  assert.equal(done.dryRun, false);
  assert.equal(done.discarded, 1);
  assert.deepEqual(done.releasedKeys, [{ topic: 'orders', key: 'a', deadLetterId: a.id }]);
  assert.deepEqual(await deadLetterIds(), [b.id]);
  assert.deepEqual(await parkedKeys(), [{ topic: 'orders', key: 'b', dead_letter_id: b.id }]);
  const outbox = (await db.pool.query(`SELECT id FROM ${T('outbox')} ORDER BY id`)).rows.map((r) => Number(r.id));
  assert.deepEqual(outbox, [waiting], 'the waiting row stays, now free to go; the discarded one is not in the outbox');
});

test('integration: discard --yes names the dead letters it deleted, not those it listed: one gone meanwhile is said to be gone', async () => {
  await reset();
  const a = await makeDeadLetter({ key: 'a', policy: 'skip' });
  const b = await makeDeadLetter({ key: 'b', policy: 'skip' });
  // Someone else deletes b and has not committed: the discard lists b, then finds it gone.
  const other = await db.pool.connect();
  try {
    await other.query('BEGIN');
    await other.query(`DELETE FROM ${T('outbox_dead_letters')} WHERE id = $1`, [b.id]);
    const p = spawnCli(['dead-letters', 'discard', `${a.id},${b.id}`, '--yes'], { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'silent' });
    let stdout = '';
    p.child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
    await waitFor('the discard to wait on the row being deleted meanwhile', async () =>
      (await db.pool.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = 'outbox-relay:dead-letters-discard' AND wait_event_type = 'Lock'`)).rowCount === 1,
    );
    await other.query('COMMIT');
    assert.equal(await p.exited, 0, p.output());
    assert.equal(
      stdout.trim(),
      `discarded 1 dead letters (ids ${a.id}); 1 listed were gone already (replayed or discarded by someone else meanwhile): ${b.id}; released 0 parked keys`,
    );
  } finally {
    other.release();
  }
  assert.deepEqual(await deadLetterIds(), []);
});

test('integration: bad discard arguments are refused before anything is deleted', async () => {
  await reset();
  const d = await makeDeadLetter({ key: 'a' });
  const before = await snapshot();
  const bad: Array<[Record<string, unknown>, (e: unknown) => boolean]> = [
    [{ ids: [d.id + 1000], yes: true }, (e) => e instanceof DeadLetterNotFoundError && /nothing was discarded/.test((e as Error).message)],
    [{ topic: 'nope', yes: true }, (e) => e instanceof DeadLetterNotFoundError],
    [{ until: 'soon', yes: true }, (e) => e instanceof ConfigError && e.setting === 'until'],
    [{ yes: true }, (e) => e instanceof ConfigError && e.setting === 'filter'],
    [{ ids: [d.id], yes: 'yes' }, (e) => e instanceof ConfigError && e.setting === 'yes'],
  ];
  for (const [options, check] of bad) {
    await assert.rejects(discardDeadLetters({ ...conn(), ...options }), check, JSON.stringify(options));
  }
  assert.deepEqual(await snapshot(), before, 'nothing changed');
});

// ---------------------------------------------------------------------------------------
// CLI

async function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | string; stdout: string[]; all: string[] }> {
  const p = spawnCli(args, { DATABASE_URL: db.databaseUrl, OUTBOX_SCHEMA: db.schema, OUTBOX_LOG_LEVEL: 'silent', ...env });
  let stdout = '';
  p.child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  const code = await p.exited;
  const lines = (t: string) => t.trim().split('\n').filter((l) => l !== '');
  return { code, stdout: lines(stdout), all: lines(p.output()) };
}

test('integration: outbox-relay dead-letters list, replay and discard from the command line', async () => {
  await reset();
  const a = await makeDeadLetter({ key: 'a' });
  const b = await makeDeadLetter({ key: 'b', policy: 'skip', reason: 'empty key', errorName: 'validation:empty_key' });
  const c = await makeDeadLetter({ key: 'c', policy: 'skip', reason: 'empty key', errorName: 'validation:empty_key' });

  const table = await cli(['dead-letters', 'list']);
  assert.equal(table.code, 0, table.all.join('\n'));
  assert.match(table.stdout[0]!, /^id\s+dead-lettered\s+topic\s+key\s+policy\s+attempts\s+error\s+reason$/);
  assert.match(table.stdout[1]!, new RegExp(`^${a.id}\\s+\\S+Z\\s+orders\\s+a\\s+park\\*\\s+3\\s+MESSAGE_TOO_LARGE\\s+message of 5000 bytes`));
  const json = await cli(['dead-letters', 'list', '--json', '--reason', 'EMPTY', '--limit', '1']);
  assert.equal(json.code, 0);
  const parsed = JSON.parse(json.stdout.join('\n'));
  assert.equal(parsed.total, 2);
  assert.deepEqual(parsed.deadLetters.map((d: { id: number }) => d.id), [b.id]);
  assert.equal(parsed.deadLetters[0].messageId, b.messageId);

  const dry = await cli(['dead-letters', 'discard', String(b.id)]);
  assert.equal(dry.code, 2);
  assert.match(dry.stdout.join('\n'), new RegExp(`^${b.id}\\s`, 'm'), 'lists what it would discard');
  assert.equal(dry.all.at(-1), 'outbox-relay: --yes: is required to discard these 1 dead letters; nothing was discarded');
  assert.deepEqual(await deadLetterIds(), [a.id, b.id, c.id]);

  const discarded = await cli(['dead-letters', 'discard', String(b.id), '--yes']);
  assert.equal(discarded.code, 0, discarded.all.join('\n'));
  assert.deepEqual(discarded.stdout, [`discarded 1 dead letters (ids ${b.id}); released 0 parked keys`]);

  const replayed = await cli(['dead-letters', 'replay', `${a.id},${c.id}`, '--rate', '20']);
  assert.equal(replayed.code, 0, replayed.all.join('\n'));
  assert.match(replayed.stdout.at(-1)!, /^queued 2 of 2 dead letters back into the outbox in \d+\.\d s \(\d+\.\d\/s\), not yet published; released 1 parked key$/);
  assert.deepEqual(await deadLetterIds(), []);
  assert.deepEqual(await parkedKeys(), []);
});

test('integration: dead-letters commands given bad arguments exit non-zero with one line and change nothing', async () => {
  await reset();
  const d = await makeDeadLetter({ key: 'a' });
  await pendingRow('a');
  const before = await snapshot();
  const missing = String(d.id + 1000);
  const cases: Array<{ args: string[]; env?: Record<string, string>; code: number; pattern: RegExp }> = [
    { args: ['dead-letters', 'list', '--since', 'yesterday'], code: 2, pattern: /^outbox-relay: --since: "yesterday" is neither an ISO 8601 time/ },
    { args: ['dead-letters', 'list', '--limit', '0'], code: 2, pattern: /^outbox-relay: --limit: 0 is not a whole number from 1 to 100000$/ },
    { args: ['dead-letters', 'list', 'abc'], code: 2, pattern: /^outbox-relay: id: "abc" is not a dead letter id/ },
    { args: ['dead-letters', 'replay', missing], code: 1, pattern: new RegExp(`^outbox-relay: dead letter ${missing} does not exist; nothing was replayed$`) },
    { args: ['dead-letters', 'replay', String(d.id), '--rate', '-5'], code: 2, pattern: /^outbox-relay: --rate: -5 is not a number above 0 and at most 1000$/ },
    { args: ['dead-letters', 'replay', String(d.id)], env: { OUTBOX_REPLAY_RATE: 'fast' }, code: 2, pattern: /^outbox-relay: OUTBOX_REPLAY_RATE: "fast" is not a number/ },
    { args: ['dead-letters', 'replay', '--until', '2024-13-01'], code: 2, pattern: /^outbox-relay: --until: "2024-13-01" is neither/ },
    { args: ['dead-letters', 'replay', '--key', 'nobody'], code: 1, pattern: /^outbox-relay: no dead letter matches key "nobody"; nothing was replayed$/ },
    { args: ['dead-letters', 'replay'], code: 2, pattern: /^outbox-relay: dead-letters: no dead letters named: give ids, a filter \(--topic, .*\) or --all$/ },
    { args: ['dead-letters', 'replay', '--all', '--key', 'a'], code: 2, pattern: /^outbox-relay: --all: cannot be combined with ids or a filter$/ },
    { args: ['dead-letters', 'discard', String(d.id)], code: 2, pattern: /^outbox-relay: --yes: is required to discard these 1 dead letters; nothing was discarded$/ },
    { args: ['dead-letters', 'discard', missing, '--yes'], code: 1, pattern: /does not exist; nothing was discarded$/ },
    { args: ['dead-letters', 'discard', '--policy', 'drop', '--yes'], code: 2, pattern: /^outbox-relay: --policy: "drop" is not one of park, skip$/ },
    { args: ['dead-letters', 'discard', '--all', '--yes'], env: { OUTBOX_SCHEMA: 'never_migrated_dl' }, code: 1, pattern: /^outbox-relay: schema "never_migrated_dl" has no outbox tables/ },
    { args: ['dead-letters', 'purge'], code: 2, pattern: /unknown command 'purge'/ },
  ];
  for (const c of cases) {
    const { code, all, stdout } = await cli(c.args, c.env);
    const errors = all.filter((l) => !stdout.includes(l));
    assert.equal(code, c.code, `${c.args.join(' ')}: ${all.join('\n')}`);
    assert.equal(errors.length, 1, `one line on stderr for ${c.args.join(' ')}, got:\n${errors.join('\n')}`);
    assert.match(errors[0]!, c.pattern);
  }
  assert.deepEqual(await snapshot(), before, 'nothing changed');
});
