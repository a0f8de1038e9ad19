import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startConsole, type OperatorConsole } from '../src/console/console.js';
import { createRelay } from '../src/relay/relay.js';
import { enqueue } from '../src/enqueue.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { cliBundle, spawnCli } from './helpers/processes.js';
import { waitFor } from './helpers/wait.js';
import { auditLines, capturedLogger, ConsoleClient, linksOf, makeDeadLetter } from './helpers/console.js';

// The operator console's pages and actions, over HTTP against real Postgres (and, for the
// overview, a real relay and broker): every page renders for one outbox and for a list of
// two; links and forms carry the path prefix; a replay started in the console moves dead
// letters back with their ids and message ids, at the rate asked; discard, unpark and
// cancel do what they say, each with its audit line. The security rules have their own
// file (console.security.integration.test.ts).

const cleanups: Array<() => Promise<unknown>> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OPERATOR = { name: 'olivia', password: 'operator passphrase 1' };
const VIEWER = { name: 'victor', password: 'viewer passphrase 22' };
const USERS = `${OPERATOR.name}:operator:${OPERATOR.password}\n${VIEWER.name}:viewer:${VIEWER.password}\n`;

async function schema(prefix: string): Promise<TestSchema> {
  const db = await createTestSchema(prefix);
  cleanups.push(() => db.drop());
  return db;
}

async function consoleOn(options: Parameters<typeof startConsole>[0]): Promise<OperatorConsole> {
  const c = await startConsole({ port: 0, ...options });
  cleanups.push(() => c.close());
  return c;
}

async function operatorClient(c: OperatorConsole): Promise<ConsoleClient> {
  const client = new ConsoleClient(c.url);
  await client.login(OPERATOR.name, OPERATOR.password);
  return client;
}

const HOSTILE_KEY = '<script>alert("k")</script>';

/** A page is an HTML page of the console: 200, no caching, the CSP, and every link under the prefix. */
function assertPage(page: { status: number; headers: Headers; body: string; url: string }, prefix: string, what: string): void {
  assert.equal(page.status, 200, `${what}: ${page.status} ${page.body.slice(0, 400)}`);
  assert.match(page.headers.get('content-type') ?? '', /^text\/html; charset=utf-8/, what);
  assert.equal(page.headers.get('cache-control'), 'no-store', what);
  assert.match(page.headers.get('content-security-policy') ?? '', /^default-src 'none';.*script-src 'self'/, what);
  assert.match(page.body, /^<!doctype html>\n<html lang="en">/, what);
  assert.equal((page.body.match(/<main id="main"/g) ?? []).length, 1, `${what}: one main`);
  assert.equal((page.body.match(/<h1>/g) ?? []).length, 1, `${what}: one h1`);
  for (const link of linksOf(page.body)) {
    assert.ok(link === '#main' || link === 'data:,' || link.startsWith(`${prefix}/`), `${what}: link ${link} is not under ${prefix}/`);
  }
  assert.ok(!page.body.includes(HOSTILE_KEY), `${what}: the hostile key appears unescaped`);
  // Every form field is labelled: an id with a <label for>, an aria-label, or a hidden input.
  for (const m of page.body.matchAll(/<(input|select)\b([^>]*)>/g)) {
    const attrs = m[2]!;
    if (/type="hidden"/.test(attrs) || /aria-label="/.test(attrs)) continue;
    const id = /\sid="([^"]+)"/.exec(attrs)?.[1];
    const wrapped = /<label>[^<]*$/.test(page.body.slice(0, m.index)) || /<label><input/.test(page.body.slice(m.index! - 7, m.index! + 6));
    assert.ok(wrapped || (id && page.body.includes(`for="${id}"`)), `${what}: unlabelled field ${m[0]}`);
  }
}

test('integration: one outbox behind a path prefix: every page renders from real data (a relay ran and runs), escaped, with links under the prefix', async () => {
  const db = await schema('console_web');
  const topic = await createTopic(2);
  // A relay publishes 30 rows and dead-letters an empty key (parked: the key's next row waits).
  const first = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema });
  cleanups.push(() => first.abort());
  let published = 0;
  let deadLettered = 0;
  first.on('batch', (b) => (published += b.count));
  first.on('deadLetter', () => deadLettered++);
  await first.start();
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await enqueue(client, Array.from({ length: 30 }, (_, i) => ({ topic, key: `k${i % 5}`, payload: { i } })), { schema: db.schema });
    await client.query(`INSERT INTO "${db.schema}".outbox (topic, key, payload) VALUES ($1, '', '{"n":1}'), ($1, '', '{"n":2}')`, [topic]);
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await waitFor('30 published and one dead letter', () => published === 30 && deadLettered === 1);
  await first.stop(); // writes its minutes
  // It wrote the current minute; the chart shows whole minutes only: move the record back one.
  const moved = await db.pool.query(`UPDATE "${db.schema}".outbox_relay_minutes SET minute = minute - interval '1 minute'`);
  assert.ok((moved.rowCount ?? 0) >= 1, 'the relay recorded its minute');
  // Dead letters of other kinds, as the relay makes them: a hostile key, a binary payload.
  const hostile = await makeDeadLetter(db, { topic: 'payments', key: HOSTILE_KEY, policy: 'skip', reason: 'Topic authorization failed <b>bold</b>', errorName: 'TOPIC_AUTHORIZATION_FAILED', payload: { html: '<img src=x onerror=alert(1)>' } });
  const bytes = await makeDeadLetter(db, { topic: 'payments', key: 'bin', policy: 'skip', payloadBytes: Buffer.from([0x00, 0x01, 0x7b, 0xff, 0x41]) });
  // A relay that runs while the pages are read: it holds the shards.
  const second = createRelay({ producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: testBrokers(), schema: db.schema });
  cleanups.push(() => second.abort());
  await second.start();

  const logs = capturedLogger();
  const c = await consoleOn({ databaseUrl: db.databaseUrl, schema: db.schema, users: USERS, pathPrefix: '/ops/', logger: logs.logger });
  assert.match(c.url, /^http:\/\/127\.0\.0\.1:\d+\/ops\/$/);
  const browser = await operatorClient(c);
  const start = await browser.get('');
  assert.equal(start.status, 303, 'one outbox: the start page is its overview');
  assert.equal(start.headers.get('location'), `/ops/outboxes/${db.schema}/`);
  const base = `outboxes/${db.schema}/`;

  const overview = await browser.get(base);
  assertPage(overview, '/ops', 'overview');
  assert.match(overview.body, /<h1>Outbox [^<]+<\/h1>/);
  assert.match(overview.body, new RegExp(`<code>${second.instanceId}</code>`), 'the running relay is listed');
  assert.match(overview.body, /<span class="badge ok">live<\/span>/);
  assert.match(overview.body, /<svg viewBox[^>]*role="img"/);
  assert.match(overview.body, /Last hour: \d+ rows in, 30 out, 1 dead-lettered/, 'the chart shows what the first relay recorded');
  assert.match(overview.body, /<dt>Dead letters<\/dt><dd><a href="[^"]+">3<\/a><\/dd>/);
  assert.match(overview.body, /<dt>Parked keys<\/dt><dd><a href="[^"]+">1<\/a><\/dd>/);
  assert.match(overview.body, /validation:empty_key/);

  const list = await browser.get(`${base}dead-letters`);
  assertPage(list, '/ops', 'dead letters');
  assert.match(list.body, /3 dead letters in all\./);
  assert.ok(list.body.includes('&lt;script&gt;alert(&quot;k&quot;)&lt;/script&gt;'), 'the hostile key, escaped');
  assert.match(list.body, /aria-label="Select dead letter \d+"/);
  assert.match(list.body, /formaction="\/ops\/outboxes\/[^"]+\/dead-letters\/discard"/);

  const filtered = await browser.get(`${base}dead-letters?topic=${topic}&errorName=validation%3Aempty_key&since=1h`);
  assertPage(filtered, '/ops', 'filtered list');
  assert.match(filtered.body, /1 dead letter matches topic/);
  assert.equal((filtered.body.match(/name="id" value="/g) ?? []).length, 1);

  // Keyset pages: after the first id, the two others.
  const firstId = Number(/name="id" value="(\d+)"/.exec(list.body)![1]);
  const nextPage = await browser.get(`${base}dead-letters?after=${firstId}`);
  assertPage(nextPage, '/ops', 'next page');
  assert.equal((nextPage.body.match(/name="id" value="/g) ?? []).length, 2);
  assert.match(nextPage.body, /First page/);

  const bad = await browser.get(`${base}dead-letters?since=yesterday`);
  assert.equal(bad.status, 400);
  assert.match(bad.body, /The &quot;since&quot; time/);
  assert.match(bad.body, /value="yesterday"/, 'the form comes back as typed');

  const detail = await browser.get(`${base}dead-letters/${hostile.id}`);
  assertPage(detail, '/ops', 'detail (JSON)');
  assert.ok(detail.body.includes(hostile.messageId));
  assert.match(detail.body, /&quot;html&quot;: &quot;&lt;img src=x onerror=alert\(1\)&gt;&quot;/, 'payload pretty-printed and escaped');
  assert.match(detail.body, /Topic authorization failed &lt;b&gt;bold&lt;\/b&gt;/);
  assert.match(detail.body, /traceparent/);
  const binary = await browser.get(`${base}dead-letters/${bytes.id}`);
  assertPage(binary, '/ops', 'detail (bytes)');
  assert.match(binary.body, /00000000 {2}00 01 7b ff 41 {35}\|\.\.\{\.A\|/);
  assert.equal((await browser.get(`${base}dead-letters/999999999`)).status, 404);

  const confirmIds = await browser.get(`${base}dead-letters/replay?scope=ids&id=${hostile.id}&id=${bytes.id}`);
  assertPage(confirmIds, '/ops', 'replay confirmation (ids)');
  assert.match(confirmIds.body, /Dry run:<\/strong> 2 dead letters selected/);
  assert.match(confirmIds.body, /<form method="post" action="\/ops\/outboxes\/[^"]+\/dead-letters\/replay"/);
  assert.match(confirmIds.body, /<input type="hidden" name="_csrf" value="[^"]+">/);
  const confirmFilter = await browser.get(`${base}dead-letters/replay?scope=filter&topic=payments`);
  assertPage(confirmFilter, '/ops', 'replay confirmation (filter)');
  assert.match(confirmFilter.body, /2 dead letters selected \(dead letters matching topic &quot;payments&quot;\)/);
  const confirmDiscard = await browser.get(`${base}dead-letters/discard?scope=all`);
  assertPage(confirmDiscard, '/ops', 'discard confirmation');
  assert.match(confirmDiscard.body, /3 dead letters selected \(every dead letter\)/);
  assert.match(confirmDiscard.body, /name="confirm" value="yes" required/);

  const parked = await browser.get(`${base}parked-keys`);
  assertPage(parked, '/ops', 'parked keys');
  assert.match(parked.body, new RegExp(`<td class="text">${topic}</td>`));
  assert.match(parked.body, /<td class="num">1<\/td>/, 'one row waits behind the parked key');
  const unpark = await browser.get(`${base}parked-keys/unpark?topic=${topic}&key=`);
  assertPage(unpark, '/ops', 'unpark confirmation');
  assert.match(unpark.body, /Parked behind<\/dt><dd><a href="[^"]+">dead letter \d+<\/a> \(validation:empty_key\)/);

  assertPage(await browser.get(`${base}jobs`), '/ops', 'jobs');
  const login = await new ConsoleClient(c.url).get('login');
  assertPage(login, '/ops', 'login');

  // Outside the prefix there is nothing; the prefix without its slash leads in.
  assert.equal((await browser.get(`/outboxes/${db.schema}/`)).status, 404);
  assert.equal((await browser.get('/ops')).headers.get('location'), '/ops/');
  await second.stop();
});

test('integration: an outboxes list of two schemas: a start page lists both, each outbox has its pages, and sees only its own dead letters', async () => {
  const a = await schema('console_web_a');
  const b = await schema('console_web_b');
  const da = await makeDeadLetter(a, { key: 'a1' });
  await makeDeadLetter(a, { key: 'a2', policy: 'skip' });
  // Each schema has its own id sequence: start b's far above a's, so an id names one dead letter.
  await b.pool.query(`SELECT setval('"${b.schema}".outbox_id_seq', 1000)`);
  const db_ = await makeDeadLetter(b, { key: 'b1', topic: 'beta-topic' });
  const c = await consoleOn({
    outboxes: [
      { name: 'alpha', databaseUrl: a.databaseUrl, schema: a.schema },
      { name: 'beta', databaseUrl: b.databaseUrl, schema: b.schema },
    ],
    users: USERS,
  });
  const browser = await operatorClient(c);
  const start = await browser.get('');
  assertPage(start, '', 'start page');
  assert.match(start.body, /<a href="\/outboxes\/alpha\/">alpha<\/a>/);
  assert.match(start.body, /<a href="\/outboxes\/beta\/">beta<\/a>/);
  assert.match(start.body, /aria-label="2 dead letters in alpha"/);
  assert.match(start.body, /aria-label="1 dead letters in beta"/);
  for (const [name, own, other] of [['alpha', da, db_], ['beta', db_, da]] as const) {
    for (const path of ['', 'dead-letters', 'parked-keys', 'jobs', `dead-letters/${own.id}`, `dead-letters/replay?scope=ids&id=${own.id}`, 'dead-letters/discard?scope=all']) {
      const page = await browser.get(`outboxes/${name}/${path}`);
      assertPage(page, '', `${name} ${path}`);
      assert.match(page.body, /All outboxes<\/a>/, 'with several, the navigation leads back to the list');
    }
    assert.equal((await browser.get(`outboxes/${name}/dead-letters/${other.id}`)).status, 404, `${name} does not show the other outbox's dead letter`);
  }
  assert.equal((await browser.get('outboxes/gamma/')).status, 404);
});

/** Poll a job's progress document until it ended. */
async function jobEnded(browser: ConsoleClient, jobPath: string): Promise<Record<string, unknown>> {
  return waitFor(`job ${jobPath} ended`, async () => {
    const p = JSON.parse((await browser.get(`${jobPath}.json`)).body) as Record<string, unknown>;
    return p.status === 'running' ? undefined : p;
  }, { timeoutMs: 60_000, intervalMs: 100 });
}

test('integration: a replay of 10 dead letters at 5/s from the console moves them back with their ids and message ids, at that rate; one audit line to start and one to end', async () => {
  const db = await schema('console_replay');
  const made = [];
  for (let i = 0; i < 10; i++) made.push(await makeDeadLetter(db, { key: `key-${i % 3}`, policy: i < 3 ? 'park' : 'skip' }));
  const other = await makeDeadLetter(db, { topic: 'not-this-topic', key: 'x' });
  const logs = capturedLogger();
  const c = await consoleOn({ databaseUrl: db.databaseUrl, schema: db.schema, users: USERS, logger: logs.logger });
  const browser = await operatorClient(c);
  const base = `outboxes/${db.schema}/dead-letters`;
  const confirm = await browser.get(`${base}/replay?scope=filter&topic=orders`);
  assert.match(confirm.body, /Dry run:<\/strong> 10 dead letters selected/);
  assert.match(confirm.body, /name="expected" value="10"/);
  const startedAt = Date.now();
  // The form carries the digest of the set the confirmation showed.
  const seen = /name="seen" value="([^"]+)"/.exec(confirm.body)?.[1] ?? '';
  const started = await browser.post(`${base}/replay`, { scope: 'filter', topic: 'orders', expected: '10', rate: '5', seen });
  assert.equal(started.status, 303, started.body.slice(0, 500));
  const jobPath = started.headers.get('location')!.slice(1);
  assert.match(jobPath, new RegExp(`^outboxes/${db.schema}/jobs/[\\w-]+$`));
  const running = await browser.get(jobPath);
  assert.equal(running.status, 200);
  assert.match(running.body, /data-job-progress="\/outboxes\/[^"]+\.json"/);
  const progress = await jobEnded(browser, jobPath);
  const elapsedMs = Date.now() - startedAt;
  assert.equal(progress.status, 'done');
  assert.equal(progress.moved, 10);
  // 10 rows at 5/s: 9 intervals of 200 ms between the first move and the last.
  assert.ok(elapsedMs >= 1_700, `took ${elapsedMs} ms, faster than 5/s`);
  const rate = progress.ratePerSecond as number;
  assert.ok(rate > 4 && rate <= 5.5, `achieved ${rate}/s`);
  const { rows } = await db.pool.query<{ id: number; message_id: string; sent_at: Date | null }>(`SELECT id, message_id, sent_at FROM "${db.schema}".outbox ORDER BY id`);
  assert.deepEqual(rows.map((r) => [Number(r.id), r.message_id, r.sent_at]), made.map((m) => [m.id, m.messageId, null]), 'back in the outbox under their ids and message ids, pending');
  const left = await db.pool.query<{ id: number }>(`SELECT id FROM "${db.schema}".outbox_dead_letters`);
  assert.deepEqual(left.rows.map((r) => Number(r.id)), [other.id], 'the other topic stays');
  const done = await browser.get(jobPath);
  assert.match(done.body, /Replayed 10 of 10 at \d\.\d\/s/);
  assert.match(done.body, /Released 3 parked keys/);
  const audits = auditLines(logs.entries());
  const start = audits.find((a) => a.action === 'replay.start');
  assert.deepEqual(
    start && { user: start.user, role: start.role, outbox: start.outbox, selection: start.selection, rows: start.rows, rate: start.rate, outcome: start.outcome },
    { user: OPERATOR.name, role: 'operator', outbox: db.schema, selection: { filter: { topic: 'orders' } }, rows: 10, rate: 5, outcome: 'ok' },
  );
  const end = audits.find((a) => a.action === 'replay');
  assert.equal(end?.rows, 10);
  assert.equal(end?.releasedKeys, 3);
  assert.equal(end?.job, start?.job);
});

test('integration: cancel stops a running replay between rows (moved rows stay moved), close() stops one too; discard and unpark through their confirmations; each audited', async () => {
  const db = await schema('console_actions');
  const made = [];
  for (let i = 0; i < 30; i++) made.push(await makeDeadLetter(db, { key: `c${i}`, policy: 'skip' }));
  const logs = capturedLogger();
  const c = await startConsole({ port: 0, databaseUrl: db.databaseUrl, schema: db.schema, users: USERS, logger: logs.logger });
  cleanups.push(() => c.close());
  const browser = await operatorClient(c);
  const base = `outboxes/${db.schema}/`;
  const ids = made.slice(0, 20).map((m) => String(m.id));
  const started = await browser.post(`${base}dead-letters/replay`, { scope: 'ids', id: ids, expected: '20', rate: '2' });
  assert.equal(started.status, 303, started.body.slice(0, 300));
  const jobPath = started.headers.get('location')!.slice(1);
  // A second replay on the same outbox is refused while this one runs.
  const second = await browser.post(`${base}dead-letters/replay`, { scope: 'ids', id: String(made[25]!.id), expected: '1', rate: '2' });
  assert.equal(second.status, 409);
  assert.match(second.body, /a replay is running/);
  const running = await browser.get(jobPath);
  assert.match(running.body, /Cancel the replay<\/button>/);
  const cancel = await browser.post(`${jobPath}/cancel`, {});
  assert.equal(cancel.status, 303);
  const progress = await jobEnded(browser, jobPath);
  assert.equal(progress.status, 'stopped');
  const moved = progress.moved as number;
  assert.ok(moved >= 1 && moved < 20, `moved ${moved}`);
  const inOutbox = Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".outbox`)).rows[0].n);
  const stillDead = Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".outbox_dead_letters`)).rows[0].n);
  assert.equal(inOutbox, moved);
  assert.equal(stillDead, 30 - moved, 'every row is in exactly one of the two tables');
  assert.match((await browser.follow(jobPath)).body, /cancelled by olivia/);

  // Discard two by id: the confirmation, then the POST without the box ticked, then with.
  const pick = made.slice(20, 22).map((m) => String(m.id));
  const confirm = await browser.get(`${base}dead-letters/discard?scope=ids&id=${pick.join('&id=')}`);
  assert.match(confirm.body, /Dry run:<\/strong> 2 dead letters selected/);
  const unticked = await browser.post(`${base}dead-letters/discard`, { scope: 'ids', id: pick, expected: '2' });
  assert.equal(unticked.status, 400);
  const discarded = await browser.post(`${base}dead-letters/discard`, { scope: 'ids', id: pick, expected: '2', confirm: 'yes' });
  assert.equal(discarded.status, 303);
  assert.match((await browser.follow(discarded.headers.get('location')!)).body, /Discarded 2 dead letters; released 0 parked keys\./);
  const gone = await db.pool.query(`SELECT id FROM "${db.schema}".outbox_dead_letters WHERE id = ANY($1::bigint[])`, [pick.map(Number)]);
  assert.equal(gone.rowCount, 0);
  // A filter that matches more now than was confirmed: refused, nothing discarded.
  const grownConfirm = await browser.get(`${base}dead-letters/discard?scope=filter&topic=orders`);
  const grownSeen = /name="seen" value="([^"]+)"/.exec(grownConfirm.body)?.[1] ?? '';
  const grownExpected = /name="expected" value="(\d+)"/.exec(grownConfirm.body)?.[1] ?? '';
  await makeDeadLetter(db, { key: 'grown', topic: 'orders', policy: 'skip' });
  const grown = await browser.post(`${base}dead-letters/discard`, { scope: 'filter', topic: 'orders', expected: grownExpected, confirm: 'yes', seen: grownSeen });
  assert.equal(grown.status, 409);
  assert.match(grown.body, /changed since the confirmation/);

  // Unpark: a parked key and its dead letter, which stays (now skip).
  const parker = await makeDeadLetter(db, { key: 'stuck', topic: 'orders' });
  const unparked = await browser.post(`${base}parked-keys/unpark`, { topic: 'orders', key: 'stuck' });
  assert.equal(unparked.status, 303);
  assert.match((await browser.follow(unparked.headers.get('location')!)).body, /Unparked key &quot;stuck&quot; of topic orders/);
  assert.equal((await db.pool.query(`SELECT 1 FROM "${db.schema}".outbox_parked_keys`)).rowCount, 0);
  assert.equal((await db.pool.query(`SELECT policy FROM "${db.schema}".outbox_dead_letters WHERE id = $1`, [parker.id])).rows[0].policy, 'skip');
  const again = await browser.post(`${base}parked-keys/unpark`, { topic: 'orders', key: 'stuck' });
  assert.match((await browser.follow(again.headers.get('location')!)).body, /is not parked \(any more\)\. Nothing changed\./);

  // close() aborts a running replay through its signal; what moved stays moved.
  const before = Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".outbox`)).rows[0].n);
  const lastConfirm = await browser.get(`${base}dead-letters/replay?scope=all`);
  const lastForm = { expected: /name="expected" value="(\d+)"/.exec(lastConfirm.body)?.[1] ?? '', seen: /name="seen" value="([^"]+)"/.exec(lastConfirm.body)?.[1] ?? '' };
  const last = await browser.post(`${base}dead-letters/replay`, { scope: 'all', rate: '1', ...lastForm });
  assert.equal(last.status, 303, last.body.slice(0, 300));
  const closing = Date.now();
  await c.close();
  await c.close(); // idempotent
  assert.ok(Date.now() - closing < 5_000, 'close is bounded');
  const after_ = Number((await db.pool.query(`SELECT count(*) AS n FROM "${db.schema}".outbox`)).rows[0].n);
  assert.ok(after_ - before >= 1 && after_ - before < 5, `moved ${after_ - before} before close stopped it`);

  const cancelLine = auditLines(logs.entries()).find((a) => a.action === 'replay.cancel');
  assert.deepEqual(cancelLine && [cancelLine.user, cancelLine.outcome, cancelLine.job], [OPERATOR.name, 'ok', jobPath.split('/').pop()]);
  const audits = auditLines(logs.entries()).map((a) => `${a.action} ${a.outcome} ${a.rows ?? '-'}`);
  assert.ok(audits.includes(`replay ok ${moved}`), audits.join('\n'));
  assert.ok(audits.includes('replay.start refused -'), audits.join('\n'));
  assert.ok(audits.includes('discard refused -'), 'the unticked box and the grown filter');
  assert.ok(audits.includes('discard ok 2'), audits.join('\n'));
  assert.ok(audits.includes('unpark ok 1'), audits.join('\n'));
  assert.ok(audits.includes('unpark refused -'), audits.join('\n'));
});

test('integration: the CLI serves the console of an outboxes file under a prefix, with users from a file; console-user prints a line that logs in', async () => {
  const a = await schema('console_cli_a');
  const b = await schema('console_cli_b');
  const dir = mkdtempSync(join(tmpdir(), 'console-cli-'));
  // console-user reads the password from stdin when it is not a terminal.
  const hashed = await cliWithStdin(['console-user', 'hana', 'operator'], 'hana passphrase 333\n');
  assert.equal(hashed.code, 0, hashed.stderr);
  const line = hashed.stdout.trim();
  assert.match(line, /^hana:operator:scrypt\$32768\$8\$1\$[\w-]+\$[\w-]+$/);
  assert.ok(!line.includes('hana passphrase'));
  writeFileSync(join(dir, 'users'), `${line}\n${VIEWER.name}:viewer:${VIEWER.password}\n`, { mode: 0o600 });
  writeFileSync(
    join(dir, 'outboxes.json'),
    JSON.stringify({ outboxes: [{ name: 'first', databaseUrlEnv: 'FIRST_URL', schema: a.schema }, { name: 'second', databaseUrlEnv: 'SECOND_URL', schema: b.schema }] }),
  );
  const served = spawnCli(['console', '--outboxes-file', join(dir, 'outboxes.json'), '--listen', '127.0.0.1:0', '--path-prefix', '/outbox'], {
    FIRST_URL: a.databaseUrl,
    SECOND_URL: b.databaseUrl,
    OUTBOX_CONSOLE_USERS_FILE: join(dir, 'users'),
  });
  cleanups.push(async () => served.child.kill('SIGKILL'));
  const url = await waitFor('the console listening', () => /listening on (http:\/\/127\.0\.0\.1:\d+\/outbox\/)/.exec(served.output())?.[1], { timeoutMs: 30_000 });
  const browser = new ConsoleClient(url);
  await browser.login('hana', 'hana passphrase 333');
  const start = await browser.get('');
  assertPage(start, '/outbox', 'CLI start page');
  assert.match(start.body, /href="\/outbox\/outboxes\/first\/"/);
  assert.match(start.body, /href="\/outbox\/outboxes\/second\/"/);
  assertPage(await browser.get('outboxes/second/dead-letters'), '/outbox', 'CLI dead letters');
  served.child.kill('SIGTERM');
  assert.equal(await served.exited, 0, served.output());
  assert.match(served.output(), /"audit":true,"user":"hana","role":"operator","action":"login","outcome":"ok"/);

  // A password on the command line is not an option: there is no flag for it.
  const refused = spawnCli(['console', '--users', 'x:operator:abcdefghij'], { DATABASE_URL: a.databaseUrl });
  assert.equal(await refused.exited, 2);
  assert.match(refused.output(), /unknown option '--users'/);
});

/** Run the CLI with `input` on its stdin (a pipe, not a terminal). */
function cliWithStdin(args: string[], input: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [cliBundle(), ...args], { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME }, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdin.end(input);
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
}
