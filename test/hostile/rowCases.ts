// The hostile-input cases of the class "odd rows" (test/hostile/cases.ts has the others):
// rows nobody should write, published by a real relay process.
import assert from 'node:assert/strict';
import pg from 'pg';
import { createTestSchema, DATABASE_URL, uniqueName } from '../helpers/db.js';
import { readTopic, testBrokers, testKafka, type ReadMessage } from '../helpers/kafka.js';
import { spawnCli } from '../helpers/processes.js';
import { waitFor } from '../helpers/wait.js';
import { finish, topicSize, type CliOutcome } from './support.js';
import type { HostileCase } from './caseTypes.js';

// ---------------------------------------------------------------------------------------
// odd rows: a relay process runs over rows nobody should write; each bad row is dead-
// lettered with a reason naming it (or refused by the table), every good row is on the
// topic exactly once, and the relay stops cleanly.

interface RowCase {
  name: string;
  /** Insert the row(s) into `outbox` of `schema` for `topic`; returns the outbox id, or
   *  undefined when the table refuses the row (then `refused` says why). */
  insert(pool: pg.Pool, schema: string, topic: string): Promise<number | undefined>;
  expect:
    | { outcome: 'dead-letter'; reason: RegExp }
    | { outcome: 'sent'; check?: (m: ReadMessage) => void }
    /** Either is a kept promise (nothing lost, nothing stuck): dead-lettered with this
     *  reason, or sent once and passing the check. */
    | { outcome: 'dead-letter or sent'; reason: RegExp; check: (m: ReadMessage) => void }
    | { outcome: 'refused'; error: RegExp };
  knownBug?: string;
}

interface GroupResult {
  ids: Map<string, number | undefined>;
  refusals: Map<string, string>;
  messages: ReadMessage[];
  deadLetters: Map<number, { reason: string; error_name: string }>;
  outbox: Map<number, { sent: boolean }>;
  relay: CliOutcome;
  canaryIds: number[];
  settled: boolean;
}

function rowGroup(group: string, rows: RowCase[], o: { env?: Record<string, string>; topicConfig?: Array<{ name: string; value: string }>; settleMs?: number } = {}): HostileCase[] {
  let result: Promise<GroupResult> | undefined;
  const run = async (): Promise<GroupResult> => {
    const t = await createTestSchema('hostile_rows');
    const topic = uniqueName('hostile_rows');
    const admin = testKafka().admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 2, replicationFactor: 1, configEntries: o.topicConfig ?? [] }], waitForLeaders: true });
    await admin.disconnect();
    try {
      const ids = new Map<string, number | undefined>();
      const refusals = new Map<string, string>();
      const canaryIds: number[] = [];
      const canary = async (i: number): Promise<void> => {
        const { rows: r } = await t.pool.query(`INSERT INTO "${t.schema}".outbox (topic, key, payload) VALUES ($1, $2, '{"canary":true}') RETURNING id`, [topic, `canary-${group}-${i}`]);
        canaryIds.push(Number(r[0].id));
      };
      await canary(0);
      for (const [i, r] of rows.entries()) {
        try {
          ids.set(r.name, await r.insert(t.pool, t.schema, topic));
        } catch (error) {
          refusals.set(r.name, (error as Error).message);
          ids.set(r.name, undefined);
        }
        await canary(i + 1);
      }
      const relay = spawnCli(['run'], { DATABASE_URL, KAFKA_BROKERS: testBrokers().join(','), OUTBOX_SCHEMA: t.schema, OUTBOX_RETRY_MAX_DELAY_MS: '500', OUTBOX_LOG_LEVEL: 'warn', ...o.env });
      // Settled: no row left pending (each sent, or moved to the dead letters).
      const settled = await waitFor(
        'every row sent or dead-lettered',
        async () => {
          const { rows: p } = await t.pool.query(`SELECT count(*)::int AS n FROM "${t.schema}".outbox WHERE sent_at IS NULL`);
          return p[0].n === 0;
        },
        { timeoutMs: o.settleMs ?? 30_000, intervalMs: 100 },
      ).then(
        () => true,
        () => false,
      );
      relay.child.kill('SIGTERM');
      const outcome = await finish(relay, 30_000);
      const total = await topicSize(topic);
      const messages = total === 0 ? [] : await readTopic(topic, (m) => m.length >= total, { timeoutMs: 30_000 });
      const { rows: dl } = await t.pool.query(`SELECT id, reason, error_name FROM "${t.schema}".outbox_dead_letters`);
      const { rows: ob } = await t.pool.query(`SELECT id, sent_at IS NOT NULL AS sent FROM "${t.schema}".outbox`);
      return {
        ids,
        refusals,
        messages,
        deadLetters: new Map(dl.map((d) => [Number(d.id), { reason: d.reason, error_name: d.error_name }])),
        outbox: new Map(ob.map((r) => [Number(r.id), { sent: r.sent }])),
        relay: outcome,
        canaryIds,
        settled,
      };
    } finally {
      await t.drop();
    }
  };
  return rows.map((r) => ({
    class: 'odd rows' as const,
    name: `${group}: ${r.name}`,
    ...(r.knownBug ? { knownBug: r.knownBug } : {}),
    async run() {
      result ??= run();
      const g = await result;
      // The line goes on: every canary (a good row of its own key) is on the topic once.
      const byOutboxId = new Map<number, number>();
      for (const m of g.messages) byOutboxId.set(Number(m.headers['outbox-id']), (byOutboxId.get(Number(m.headers['outbox-id'])) ?? 0) + 1);
      const id = g.ids.get(r.name);
      if (r.expect.outcome === 'refused') {
        assert.equal(id, undefined, 'the table accepted the row');
        assert.match(g.refusals.get(r.name) ?? '', r.expect.error);
      } else {
        assert.ok(id !== undefined, `the table refused the row: ${g.refusals.get(r.name)}`);
        if (r.expect.outcome === 'dead-letter or sent' && g.deadLetters.has(id)) {
          assert.match(`${g.deadLetters.get(id)!.error_name}: ${g.deadLetters.get(id)!.reason}`, r.expect.reason);
        } else if (r.expect.outcome === 'dead-letter or sent') {
          assert.equal(byOutboxId.get(id), 1, `row ${id} neither dead-lettered nor on the topic exactly once`);
          r.expect.check(g.messages.find((x) => Number(x.headers['outbox-id']) === id)!);
        } else if (r.expect.outcome === 'dead-letter') {
          const d = g.deadLetters.get(id);
          assert.ok(d, `row ${id} was not dead-lettered (settled: ${g.settled}; in outbox: ${JSON.stringify(g.outbox.get(id))}; on the topic ${byOutboxId.get(id) ?? 0} times)`);
          assert.match(`${d.error_name}: ${d.reason}`, r.expect.reason);
          assert.equal(d.reason.includes('\n'), false, 'one-line reason');
          assert.equal(byOutboxId.get(id) ?? 0, 0, 'a dead letter is not on the topic');
        } else {
          assert.equal(byOutboxId.get(id), 1, `row ${id} on the topic exactly once`);
          const m = g.messages.find((x) => Number(x.headers['outbox-id']) === id)!;
          r.expect.check?.(m);
        }
      }
      assert.ok(g.settled, 'every row was sent or dead-lettered within the bound');
      for (const c of g.canaryIds) assert.equal(byOutboxId.get(c), 1, `canary row ${c} on the topic exactly once (other keys flow)`);
      const dup = [...byOutboxId.entries()].filter(([, n]) => n > 1);
      assert.deepEqual(dup, [], 'no row on the topic twice (no crash happened)');
      assert.equal(g.relay.code, 0, `relay exit code after SIGTERM; output:\n${g.relay.output.slice(-2000)}`);
    },
  }));
}

const insertRow =
  (cols: Record<string, string>, params: (topic: string) => unknown[] = (t) => [t]) =>
  async (pool: pg.Pool, schema: string, topic: string): Promise<number | undefined> => {
    const sql = `INSERT INTO "${schema}".outbox (${Object.keys(cols).join(', ')}) VALUES (${Object.values(cols).join(', ')}) RETURNING id`;
    const { rows } = await pool.query(sql, sql.includes('$1') ? params(topic) : []);
    return Number(rows[0].id);
  };

export function rowCases(): HostileCase[] {
  return [
    ...rowGroup('rows', [
      { name: 'a null key', insert: insertRow({ topic: '$1', key: 'NULL', payload: `'{}'` }), expect: { outcome: 'refused', error: /null value in column "key"/ } },
      { name: 'an empty key', insert: insertRow({ topic: '$1', key: `''`, payload: `'{}'` }), expect: { outcome: 'dead-letter', reason: /empty_key/ } },
      {
        name: 'a tombstone (no payload)',
        insert: insertRow({ topic: '$1', key: `'tomb'` }),
        expect: { outcome: 'sent', check: (m) => assert.equal(m.value, null) },
      },
      {
        name: 'binary payload that is not UTF-8',
        insert: insertRow({ topic: '$1', key: `'bin'`, payload_bytes: `'\\xfffe00c328'::bytea` }),
        expect: { outcome: 'sent', check: (m) => assert.deepEqual(m.value, Buffer.from([0xff, 0xfe, 0x00, 0xc3, 0x28])) },
      },
      { name: 'both payload and payload_bytes', insert: insertRow({ topic: '$1', key: `'both'`, payload: `'{}'`, payload_bytes: `'\\x01'::bytea` }), expect: { outcome: 'refused', error: /outbox_one_payload/ } },
      { name: 'headers that are a JSON array', insert: insertRow({ topic: '$1', key: `'harr'`, headers: `'[1,2]'` }), expect: { outcome: 'refused', error: /outbox_headers_object/ } },
      { name: 'headers whose values are not strings', insert: insertRow({ topic: '$1', key: `'hnum'`, payload: `'{}'`, headers: `'{"n": 1, "o": {"x": true}}'` }), expect: { outcome: 'dead-letter or sent', reason: /header/i, check: (m) => (assert.equal(m.headers.n, '1'), assert.equal(m.headers.o, '{"x":true}')) } },
      { name: 'a topic name with a space', insert: insertRow({ topic: `'bad topic'`, key: `'t1'`, payload: `'{}'` }), expect: { outcome: 'dead-letter', reason: /invalid_topic/ } },
      { name: 'a 300-character topic name', insert: insertRow({ topic: `repeat('t', 300)`, key: `'t2'`, payload: `'{}'` }), expect: { outcome: 'dead-letter', reason: /invalid_topic/ } },
      { name: 'the topic name ".."', insert: insertRow({ topic: `'..'`, key: `'t3'`, payload: `'{}'` }), expect: { outcome: 'dead-letter', reason: /invalid_topic/ } },
      {
        name: 'unicode key and header values',
        insert: insertRow({ topic: '$1', key: `'ключ-😀'`, payload: `'{"ü":"é"}'`, headers: `'{"trace": "日本"}'` }),
        expect: { outcome: 'sent', check: (m) => (assert.equal(m.key, 'ключ-😀'), assert.equal(m.headers.trace, '日本')) },
      },
    ]),
    // Found by this suite: the row is valid for the outbox, but moving it to the dead
    // letters fails (btree index row of outbox_dead_letters (topic, key, id) over 8191
    // bytes), so its batch rolls back and retries for ever, re-publishing the good rows of
    // the batch each time.
    ...rowGroup('huge key', [
      {
        name: 'a 2 MB key',
        insert: insertRow({ topic: '$1', key: `repeat('k', 2000000)`, payload: `'{}'` }),
        expect: { outcome: 'dead-letter', reason: /too_large|too large|bytes/ },
      },
    ], { settleMs: 15_000 }),
    ...rowGroup('created_at', [
      // Valid events whose created_at no Kafka timestamp can hold: published, stamped at send
      // time, the original kept in the outbox-created-at header (README, schema).
      { name: "created_at = 'infinity'", insert: insertRow({ topic: '$1', key: `'inf'`, payload: `'{}'`, created_at: `'infinity'` }), expect: { outcome: 'sent', check: (m) => assert.equal(m.headers['outbox-created-at'], 'infinity') } },
      { name: "created_at = '-infinity'", insert: insertRow({ topic: '$1', key: `'ninf'`, payload: `'{}'`, created_at: `'-infinity'` }), expect: { outcome: 'sent', check: (m) => assert.equal(m.headers['outbox-created-at'], '-infinity') } },
      { name: "created_at in the year 290000 (past JavaScript's Date range)", insert: insertRow({ topic: '$1', key: `'y290k'`, payload: `'{}'`, created_at: `'290000-01-01'` }), expect: { outcome: 'sent', check: (m) => assert.match(m.headers['outbox-created-at'] ?? '', /^290000-01-01 \d\d:00:00\+00$/) } },
    ], { settleMs: 20_000 }),
    ...rowGroup(
      'topics',
      [
        {
          name: 'a topic that collides with an existing one (x.y vs x_y)',
          insert: async (pool, schema, topic) => {
            const dotted = `${topic.replace(/_/g, '-')}.col`;
            const admin = testKafka().admin();
            await admin.connect();
            await admin.createTopics({ topics: [{ topic: dotted, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
            await admin.disconnect();
            return insertRow({ topic: '$1', key: `'coll'`, payload: `'{}'` }, () => [dotted.replace('.col', '_col')])(pool, schema, topic);
          },
          expect: { outcome: 'dead-letter', reason: /collid|UNKNOWN_TOPIC|INVALID_TOPIC|topic/i },
        },
      ],
      { env: { OUTBOX_MISSING_TOPIC_TIMEOUT_MS: '2000' }, settleMs: 30_000 },
    ),
    ...rowGroup(
      'partial refusal',
      [
        {
          name: 'a row the broker refuses (over the topic max.message.bytes) among good ones',
          insert: insertRow({ topic: '$1', key: `'big'`, payload: `jsonb_build_object('x', repeat('y', 5000))` }),
          expect: { outcome: 'dead-letter', reason: /MESSAGE_TOO_LARGE|too large/i },
        },
      ],
      { topicConfig: [{ name: 'max.message.bytes', value: '2000' }] },
    ),
  ];
}
