import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startConsole, type OperatorConsole } from '../src/console/console.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { ConsoleClient, linksOf, makeDeadLetter } from './helpers/console.js';
import { launchBrowser, type TestBrowser } from './helpers/browser.js';
import { logInWithForm } from './helpers/consoleBrowser.js';
import { readDeadLetter, searchDeadLetters } from '../src/console/data/deadLetters.js';
import { readFlow } from '../src/console/data/flow.js';
import { LIST_TEXT_CHARS } from '../src/console/sql/deadLetters.js';

// Issue 33: what an attacker with a real Chromium found in the console, each fixed and
// pinned here against real Postgres (over HTTP, and in Chromium where the browser is the
// point): an open redirect after login, the login throttle reset by made-up names, a
// discard by filter that took rows arriving after its confirmation, parked keys too long
// to unpark, deeply nested JSON, out-of-range filters and heavy rows.

const OPERATOR = { name: 'olga', password: `operator-${uniqueName('pw')}` };

let db: TestSchema;
let plain: OperatorConsole;
let prefixed: OperatorConsole;
let browser: TestBrowser | undefined;
const cleanups: Array<() => Promise<unknown>> = [];

before(async () => {
  db = await createTestSchema('console_h33');
  cleanups.push(() => db.drop());
  const users = `${OPERATOR.name}:operator:${OPERATOR.password}\n`;
  plain = await startConsole({ port: 0, databaseUrl: db.databaseUrl, schema: db.schema, users });
  cleanups.push(() => plain.close());
  prefixed = await startConsole({ port: 0, databaseUrl: db.databaseUrl, schema: db.schema, users, pathPrefix: '/ops' });
  cleanups.push(() => prefixed.close());
});

after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function operator(c: OperatorConsole): Promise<ConsoleClient> {
  const x = new ConsoleClient(c.url);
  await x.login(OPERATOR.name, OPERATOR.password);
  return x;
}

const outbox = (rest = ''): string => `outboxes/${db.schema}/${rest}`;

test('integration: after a good login the browser goes only to a page under the console\'s own prefix, whatever `next` says (/..//evil.example and its kind)', async () => {
  // In Chromium: the attack as reported.
  browser = await launchBrowser();
  cleanups.push(() => browser!.close());
  const { page } = browser;
  await page.goto(`${plain.url}login?next=${encodeURIComponent('/..//evil.example')}`);
  await logInWithForm(page, OPERATOR.name, OPERATOR.password);
  assert.equal(new URL(page.url()).origin, new URL(plain.url).origin, `after the login the browser is at ${page.url()}`);

  // Over HTTP, each console (no prefix, and /ops): the Location, resolved as a browser
  // resolves it, is this origin and under the prefix.
  const attempts = ['/..//evil.example', '/ops/..//evil.example', '//evil.example', '/\\evil.example', '/ops/../..//evil.example/x', '/./..//evil.example', '/%2e%2e//evil.example', 'https://evil.example/', '/ops/%2e%2e/%2e%2e//evil.example'];
  for (const c of [plain, prefixed]) {
    const prefix = new URL(c.url).pathname; // '/' or '/ops/'
    for (const next of attempts) {
      const x = new ConsoleClient(c.url);
      const answer = await x.post('login', { username: OPERATOR.name, password: OPERATOR.password, next }, { csrf: false });
      assert.equal(answer.status, 303, `precondition: the login succeeded (${next})`);
      const to = new URL(answer.headers.get('location')!, c.url);
      assert.equal(to.origin, new URL(c.url).origin, `${prefix} next=${next}: Location ${answer.headers.get('location')} leaves the console`);
      assert.ok(to.pathname.startsWith(prefix), `${prefix} next=${next}: Location ${to.pathname} is under ${prefix}`);
    }
    // A real page of the console is still where a login goes back to.
    const x = new ConsoleClient(c.url);
    const back = `${prefix}${outbox('dead-letters')}?topic=orders`;
    const answer = await x.post('login', { username: OPERATOR.name, password: OPERATOR.password, next: back }, { csrf: false });
    assert.equal(answer.headers.get('location'), back);
  }
});

test('integration: one address trying made-up names is refused (429) after 20 failures, the real name too; another name from elsewhere is not', async () => {
  // A console of its own: its throttle refuses this address for a minute.
  const users = `${OPERATOR.name}:operator:${OPERATOR.password}\n`;
  const own = await startConsole({ port: 0, databaseUrl: db.databaseUrl, schema: db.schema, users });
  cleanups.push(() => own.close());
  const x = new ConsoleClient(own.url);
  const statuses: number[] = [];
  for (let i = 0; i < 25; i++) statuses.push((await x.post('login', { username: `made-up-${i}`, password: 'guess', next: '/' }, { csrf: false })).status);
  assert.deepEqual(statuses.slice(0, 20), Array(20).fill(401), 'the first 20 are checked (wrong password)');
  assert.deepEqual(statuses.slice(20), Array(5).fill(429), 'then the address is refused');
  const real = await x.post('login', { username: OPERATOR.name, password: OPERATOR.password, next: '/' }, { csrf: false });
  assert.equal(real.status, 429);
  assert.match(real.body, /Too many failed logins from this address/);
});

test('integration: out-of-range or malformed query input answers 400 with one line saying what is wrong, never 500', async () => {
  await makeDeadLetter(db, { key: 'range-probe', policy: 'skip' });
  const x = await operator(plain);
  const cases: Array<[string, RegExp]> = [
    [outbox('dead-letters?since=99999999d'), /"since" time "99999999d" is out of range/],
    [outbox('dead-letters?until=99999999d'), /"until" time "99999999d" is out of range/],
    [outbox('dead-letters?since=0000-01-01'), /"since" time/],
    [outbox('dead-letters?topic=%00'), /topic contains a NUL character/],
    [outbox('dead-letters?key=a%00b'), /key contains a NUL character/],
    [outbox('dead-letters/replay?scope=filter&since=99999999d'), /"since" time "99999999d" is out of range/],
    [outbox('dead-letters/discard?scope=filter&reason=%00'), /reason contains a NUL character/],
    [outbox('parked-keys?afterAt=-005000-01-01T00:00:00Z&afterTopic=a&afterKey=b'), /page link is malformed/],
    [outbox('parked-keys?afterAt=2024-01-01T00:00:00Z&afterTopic=a%00&afterKey=b'), /page link is malformed/],
    [outbox('parked-keys/unpark?topic=orders&key=%00'), /key contains a NUL character/],
  ];
  for (const [path, said] of cases) {
    const page = await x.get(path);
    assert.equal(page.status, 400, `${path}: ${page.status} ${page.body.slice(0, 200)}`);
    assert.match(page.body.replaceAll('&quot;', '"'), said, path);
  }
  // The precondition of the cases: a good filter on the same page answers 200.
  assert.equal((await x.get(outbox('dead-letters?since=7d&key=range-probe'))).status, 200);
});

test('integration: a dead letter whose payload nests 10,000 levels has a detail page (200), and the list of heavy rows carries no payload', async () => {
  const deep = await makeDeadLetter(db, { topic: 'deep', key: 'deep', policy: 'skip' });
  const text = `${'{"a": ['.repeat(5_000)}1${']}'.repeat(5_000)}`;
  // The headers too: one value nesting 10,000 levels.
  await db.pool.query(`UPDATE "${db.schema}".outbox_dead_letters SET payload = $1::jsonb, headers = jsonb_build_object('deep', $1::jsonb) WHERE id = $2`, [text, deep.id]);
  const depth = await db.pool.query<{ n: number }>(`SELECT length(payload::text)::int AS n FROM "${db.schema}".outbox_dead_letters WHERE id = $1`, [deep.id]);
  assert.equal(depth.rows[0]!.n, text.length, 'precondition: the payload nests 10,000 levels in the table');
  const x = await operator(plain);
  const page = await x.get(outbox(`dead-letters/${deep.id}`));
  assert.equal(page.status, 200, page.body.slice(0, 300));
  assert.match(page.body, /<pre tabindex="0" aria-label="Payload, JSON">\{\n {2}&quot;a&quot;: \[\n {4}\{/);
  assert.match(page.body, /a value nested too deep to show/);

  // Heavy rows: 1 MB payloads, a 4,000-character key and reason; the list's page stays small.
  const big = 'x'.repeat(1_000_000);
  for (let i = 0; i < 5; i++) await makeDeadLetter(db, { topic: 'heavy', key: `${'é'.repeat(4_000)}${i}`, policy: 'skip', reason: 'r'.repeat(4_000), payload: { big } });
  const sizes = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters WHERE topic = 'heavy' AND octet_length(payload::text) > 1000000`);
  assert.equal(sizes.rows[0]!.n, 5, 'precondition: five 1 MB payloads');
  const list = await x.get(outbox('dead-letters?topic=heavy'));
  assert.equal(list.status, 200);
  assert.equal((list.body.match(/aria-label="Dead letter \d+"/g) ?? []).length, 5, 'the five rows are listed');
  assert.ok(list.body.length < 40_000, `the list page is ${list.body.length} characters`);
  assert.ok(!list.body.includes('x'.repeat(1_000)), 'no payload in the list');
  assert.ok(!list.body.includes('é'.repeat(300)), 'keys cut in the list');
  // Cut in SQL: the data layer's page holds no payload, and keys and reasons cut.
  const rows = (await searchDeadLetters(db.pool, db.schema, { topic: 'heavy' }, { afterId: null, limit: 50 })).deadLetters;
  assert.equal(rows.length, 5);
  for (const d of rows) {
    assert.equal(d.payload, null);
    assert.equal(d.headers, null);
    assert.ok(d.key.length <= LIST_TEXT_CHARS && d.key.endsWith('…') && d.reason.length <= LIST_TEXT_CHARS, `cut: key ${d.key.length}, reason ${d.reason.length}`);
  }
  // A dead letter whole still has all of it.
  const one = await readDeadLetter(db.pool, db.schema, rows[0]!.id);
  assert.equal((one?.payload as { big: string }).big.length, 1_000_000);
  assert.equal(one?.key.length, 4_001);
});

test('integration: a parked key of 4,000 "é" is unparked through the pages (its link and form name it by its dead letter, never the key in a URL)', async () => {
  const key = 'é'.repeat(4_000);
  const parker = await makeDeadLetter(db, { topic: 'long', key, policy: 'park' });
  const parked = async (): Promise<number> => (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_parked_keys WHERE topic = 'long' AND key = $1`, [key])).rows[0].n;
  assert.equal(await parked(), 1, 'precondition: the key is parked');
  const x = await operator(plain);
  const list = await x.get(outbox('parked-keys'));
  const link = linksOf(list.body).find((l) => l.includes('/parked-keys/unpark?') && (l.includes(`deadLetter=${parker.id}`) || l.includes('topic=long')));
  assert.ok(link, 'the parked keys page links to its unpark');
  assert.ok(link.length < 1_000, `the link is ${link.length} characters`);
  const confirm = await x.get(link);
  assert.equal(confirm.status, 200, `the confirmation answers ${confirm.status}`);
  const form = Object.fromEntries([...confirm.body.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((m) => [m[1]!, m[2]!.replaceAll('&amp;', '&')]));
  const done = await x.post(outbox('parked-keys/unpark'), form);
  assert.equal(done.status, 303, done.body.slice(0, 300));
  assert.equal(await parked(), 0, 'unparked');
  const after = await x.follow(outbox('parked-keys'));
  assert.match(after.body, /Unparked key/);
});

/** The hidden fields of a page's form whose action ends with `action`. */
function formFields(body: string, action: string): Record<string, string> {
  const form = [...body.matchAll(/<form method="post" action="([^"]+)"[^>]*>([\s\S]*?)<\/form>/g)].find((m) => m[1]!.endsWith(action));
  assert.ok(form, `a form posting to …${action}`);
  return Object.fromEntries([...form[2]!.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].map((m) => [m[1]!, m[2]!.replaceAll('&amp;', '&')]));
}

test('integration: a discard (and a replay) by filter takes exactly the dead letters its confirmation showed: a set changed since (same count or more) is refused with 409, nothing changed', async () => {
  const x = await operator(plain);
  const dead = async (): Promise<number[]> => (await db.pool.query<{ id: string }>(`SELECT id FROM "${db.schema}".outbox_dead_letters WHERE topic = 'exact' ORDER BY id`)).rows.map((r) => Number(r.id));
  const made = [];
  for (let i = 0; i < 3; i++) made.push((await makeDeadLetter(db, { topic: 'exact', key: `e${i}`, policy: 'skip' })).id);
  const confirmation = await x.get(outbox('dead-letters/discard?scope=filter&topic=exact'));
  assert.equal(confirmation.status, 200);
  const form: Record<string, string> = { ...formFields(confirmation.body, '/discard'), confirm: 'yes' };
  assert.equal(form.expected, '3', 'precondition: the confirmation shows 3');
  // Meanwhile one of them is replayed elsewhere (gone) and a new one arrives: 3 match again.
  await db.pool.query(`DELETE FROM "${db.schema}".outbox_dead_letters WHERE id = $1`, [made[2]]);
  const late = (await makeDeadLetter(db, { topic: 'exact', key: 'late', policy: 'skip' })).id;
  assert.deepEqual(await dead(), [made[0], made[1], late], 'precondition: the same count, another set');
  const refused = await x.post(outbox('dead-letters/discard'), form);
  assert.equal(refused.status, 409, refused.body.slice(0, 300));
  assert.match(refused.body, /changed since the confirmation/);
  assert.deepEqual(await dead(), [made[0], made[1], late], 'nothing discarded, the late one least of all');
  // A replay's confirmation of the same filter, then one more arrives: refused the same way.
  const replayConfirmation = await x.get(outbox('dead-letters/replay?scope=filter&topic=exact'));
  const replayForm = formFields(replayConfirmation.body, '/replay');
  await makeDeadLetter(db, { topic: 'exact', key: 'later', policy: 'skip' });
  const replayRefused = await x.post(outbox('dead-letters/replay'), { ...replayForm, rate: '10' });
  assert.equal(replayRefused.status, 409, replayRefused.body.slice(0, 300));
  // Confirmed again, the set is what the confirmation shows now: all four go.
  const again = await x.get(outbox('dead-letters/discard?scope=filter&topic=exact'));
  const done = await x.post(outbox('dead-letters/discard'), { ...formFields(again.body, '/discard'), confirm: 'yes' });
  assert.equal(done.status, 303, done.body.slice(0, 300));
  assert.deepEqual(await dead(), []);
});

test('integration: readFlow gives the first minute a relay recorded (no mark the minute before) ingress null, unknown, not 0', async () => {
  await db.pool.query(
    `INSERT INTO "${db.schema}".outbox_relay_minutes (minute, relay_id, sent, dead_lettered, last_id)
     VALUES (date_trunc('minute', now()) - interval '2 minutes', 'r-first', 50, 0, 1000),
            (date_trunc('minute', now()) - interval '1 minute', 'r-first', 60, 0, 1090)`,
  );
  const flow = await readFlow(db.pool, `"${db.schema}"`);
  const [first, second] = flow.slice(-2);
  assert.equal(first!.recorded, true, 'precondition: the first minute is recorded');
  assert.equal(first!.ingress, null);
  assert.equal(second!.ingress, 90);
});
