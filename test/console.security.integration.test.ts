import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startConsole, type ConsoleOptions, type OperatorConsole } from '../src/console/console.js';
import { roleScript } from '../src/commands/roles.js';
import { CONTENT_SECURITY_POLICY } from '../src/console/web/security.js';
import { hashPassword } from '../src/console/web/passwords.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { auditLines, capturedLogger, ConsoleClient, makeDeadLetter } from './helpers/console.js';

// The console is secure by default, checked over HTTP against real Postgres: loopback
// unless told otherwise; nothing without a login; viewers read and cannot act; every POST
// needs the session's CSRF token and the console's own origin; strict headers on every
// response; no secret (the database password, a user's password) in any page, header or
// log line; a database role that may only read sees the pages and gets a clear 403 for
// each action, with nothing changed; every action attempted leaves an audit line.

const DB_SECRET = `dbpw-${uniqueName('s')}`;
const OPERATOR = { name: 'opal', password: `operator-${uniqueName('p')}` };
const VIEWER = { name: 'vera', password: `viewer-${uniqueName('p')}` };

let db: TestSchema;
let users: string;
/** The database URL with a password in it (trust auth on the test server ignores it). */
let secretUrl: string;
const cleanups: Array<() => Promise<unknown>> = [];
const logs = capturedLogger();
const clients: ConsoleClient[] = [];
const viewerGroup = uniqueName('sec_viewer');
const viewerLogin = uniqueName('sec_viewer_login');
const unused = [uniqueName('sec_relay'), uniqueName('sec_consumer'), uniqueName('sec_operator')];

before(async () => {
  db = await createTestSchema('console_sec');
  const url = new URL(db.databaseUrl);
  if (!url.password) url.password = DB_SECRET;
  secretUrl = url.toString();
  // The operator's password is stored hashed, the viewer's as plain text: both must stay secret.
  users = `${OPERATOR.name}:operator:${await hashPassword(OPERATOR.password)}\n${VIEWER.name}:viewer:${VIEWER.password}\n`;
  for (let i = 0; i < 5; i++) await makeDeadLetter(db, { key: `k${i}`, policy: i === 0 ? 'park' : 'skip' });
});

after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  const roles = [viewerLogin, viewerGroup, ...unused];
  await db.pool.query(`DROP OWNED BY ${roles.map((r) => `"${r}"`).join(', ')}`).catch(() => undefined);
  for (const r of roles) await db.pool.query(`DROP ROLE IF EXISTS "${r}"`).catch(() => undefined);
  await db.drop();
});

async function consoleWith(options: Partial<ConsoleOptions> = {}): Promise<OperatorConsole> {
  const c = await startConsole({ port: 0, databaseUrl: secretUrl, schema: db.schema, users, logger: logs.logger, ...options } as ConsoleOptions);
  cleanups.push(() => c.close());
  return c;
}

function client(c: OperatorConsole): ConsoleClient {
  const x = new ConsoleClient(c.url);
  clients.push(x);
  return x;
}

async function loggedIn(c: OperatorConsole, who: { name: string; password: string }): Promise<ConsoleClient> {
  const x = client(c);
  await x.login(who.name, who.password);
  return x;
}

/** Everything in the tables an action could change. */
async function snapshot(): Promise<unknown> {
  const q = async (sql: string) => (await db.pool.query(sql)).rows;
  return {
    outbox: await q(`SELECT id FROM "${db.schema}".outbox ORDER BY id`),
    dead: await q(`SELECT id, policy FROM "${db.schema}".outbox_dead_letters ORDER BY id`),
    parked: await q(`SELECT topic, key, dead_letter_id FROM "${db.schema}".outbox_parked_keys ORDER BY topic, key`),
  };
}

async function firstDeadLetterId(): Promise<string> {
  return String((await db.pool.query(`SELECT min(id) AS id FROM "${db.schema}".outbox_dead_letters`)).rows[0].id);
}

test('integration: listens on 127.0.0.1 unless told otherwise', async () => {
  const c = await consoleWith();
  assert.equal(c.host, '127.0.0.1');
  assert.match(c.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
});

test('integration: without a session, pages redirect to the login, actions and progress answer 401; a wrong password 401, then 429; a login posted from another site 403', async () => {
  const c = await consoleWith({ pathPrefix: '/ops' });
  const anonymous = client(c);
  const page = await anonymous.get(`outboxes/${db.schema}/dead-letters?topic=a`);
  assert.equal(page.status, 303);
  assert.equal(page.headers.get('location'), `/ops/login?next=${encodeURIComponent(`/ops/outboxes/${db.schema}/dead-letters?topic=a`)}`);
  assert.equal((await anonymous.get(`outboxes/${db.schema}/jobs/x.json`)).status, 401);
  const before_ = await snapshot();
  for (const path of ['dead-letters/replay', 'dead-letters/discard', 'parked-keys/unpark', 'jobs/x/cancel']) {
    const r = await anonymous.post(`outboxes/${db.schema}/${path}`, { scope: 'all', expected: '5', rate: '1', confirm: 'yes', topic: 'orders', key: 'k0' }, { csrf: 'guess' });
    assert.equal(r.status, 401, path);
  }
  assert.deepEqual(await snapshot(), before_);

  const wrong = await anonymous.post('login', { username: OPERATOR.name, password: 'not it', next: '/ops/' }, { csrf: false });
  assert.equal(wrong.status, 401);
  assert.match(wrong.body, /Wrong user name or password\./);
  assert.equal(wrong.headers.get('set-cookie'), null);
  const unknown = await anonymous.post('login', { username: 'nobody', password: 'whatever1' }, { csrf: false });
  assert.equal(unknown.status, 401, 'an unknown user gets the same answer');
  for (let i = 0; i < 4; i++) await anonymous.post('login', { username: OPERATOR.name, password: `wrong ${i}` }, { csrf: false });
  const throttled = await anonymous.post('login', { username: OPERATOR.name, password: OPERATOR.password }, { csrf: false });
  assert.equal(throttled.status, 429, 'five failures in a minute: even the right password waits');
  assert.ok(Number(throttled.headers.get('retry-after')) > 0);
  const foreign = await anonymous.post('login', { username: VIEWER.name, password: VIEWER.password }, { csrf: false, headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' } });
  assert.equal(foreign.status, 403);

  // Where a login may send the browser: only back into the console.
  for (const next of ['//evil.example/', 'https://evil.example/', '/elsewhere', '/ops/../x', '/ops/%2e%2e/x', '/ops\\@evil', '/ops/login']) {
    const r = await client(c).post('login', { username: VIEWER.name, password: VIEWER.password, next }, { csrf: false });
    assert.equal(r.status, 303);
    const location = r.headers.get('location')!;
    assert.equal(location, '/ops/', `${next} → ${location}`);
  }
  const audits = auditLines(logs.entries()).filter((a) => a.action === 'login');
  assert.ok(audits.some((a) => a.user === OPERATOR.name && a.outcome === 'refused' && a.detail === 'wrong user name or password'));
  assert.ok(audits.some((a) => a.user === '(unknown user)' && a.outcome === 'refused'), 'a name that is no user is not logged: it may be a password');
  assert.ok(!logs.lines.some((l) => l.includes('"nobody"')));
});

test('integration: a viewer reads every page but has no action; its POSTs (with a valid CSRF token) are 403 and change nothing; logging out ends the session', async () => {
  const c = await consoleWith();
  const viewer = await loggedIn(c, VIEWER);
  const base = `outboxes/${db.schema}/`;
  for (const path of ['', 'dead-letters', `dead-letters/${await firstDeadLetterId()}`, 'parked-keys', 'jobs']) {
    const page = await viewer.get(`${base}${path}`);
    assert.equal(page.status, 200, path);
    assert.doesNotMatch(page.body, /name="id"|dead-letters\/(replay|discard)|parked-keys\/unpark|Discard (selected|all|this)|Replay (selected|all|this)|method="post" action="[^"]*\/outboxes\//, `${path}: no action for a viewer`);
  }
  assert.equal((await viewer.get(`${base}dead-letters/replay?scope=all`)).status, 403);
  assert.equal((await viewer.get(`${base}parked-keys/unpark?topic=orders&key=k0`)).status, 403);
  const before_ = await snapshot();
  const token = await viewer.csrfToken();
  for (const [path, form] of [
    ['dead-letters/replay', { scope: 'all', expected: '5', rate: '10' }],
    ['dead-letters/discard', { scope: 'all', expected: '5', confirm: 'yes' }],
    ['parked-keys/unpark', { topic: 'orders', key: 'k0' }],
  ] as const) {
    const r = await viewer.post(`${base}${path}`, form, { csrf: token });
    assert.equal(r.status, 403, path);
    assert.match(r.body, /Only an operator may do this/);
  }
  assert.deepEqual(await snapshot(), before_);
  const refused = auditLines(logs.entries()).filter((a) => a.user === VIEWER.name && a.outcome === 'refused');
  assert.deepEqual(refused.map((a) => a.action).sort(), ['discard', 'replay.start', 'unpark']);

  const out = await viewer.post('logout', {}, { csrf: token });
  assert.equal(out.status, 303);
  assert.match(out.headers.get('set-cookie')!, /Max-Age=0/);
  assert.equal((await viewer.get(base)).status, 303, 'the old cookie is no session any more');
});

test('integration: an operator POST without the CSRF token, with a wrong one, from another origin or another site is 403 and changes nothing', async () => {
  const c = await consoleWith();
  const operator = await loggedIn(c, OPERATOR);
  const path = `outboxes/${db.schema}/dead-letters/discard`;
  const form = { scope: 'all', expected: '5', confirm: 'yes' };
  const before_ = await snapshot();
  const cases: Array<[string, Parameters<ConsoleClient['post']>[2]]> = [
    ['no token', { csrf: false }],
    ['a wrong token', { csrf: 'x'.repeat(43) }],
    ['another origin', { headers: { origin: 'http://evil.example' } }],
    ['another site', { headers: { 'sec-fetch-site': 'cross-site' } }],
    ['an opaque origin from another site', { headers: { origin: 'null', 'sec-fetch-site': 'cross-site' } }],
  ];
  for (const [what, options] of cases) {
    const r = await operator.post(path, form, options);
    assert.equal(r.status, 403, what);
    assert.match(r.body, /Refused: .*Nothing was changed\./, what);
  }
  // An opaque origin and no Sec-Fetch-Site to say more: refused too.
  const opaque = await fetch(operator.url(path), {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'null', cookie: operator.cookie! },
    body: new URLSearchParams({ ...form, _csrf: await operator.csrfToken() }),
  });
  assert.equal(opaque.status, 403, 'an opaque origin');
  assert.deepEqual(await snapshot(), before_, 'nothing discarded');
  // Each refusal left its audit line.
  const refusals = auditLines(logs.entries()).filter((a) => a.user === OPERATOR.name && a.action === 'discard' && a.outcome === 'refused' && /^Refused: /.test(String(a.detail)));
  assert.equal(refusals.length, cases.length + 1);
  // The same form with the token from the console's own pages is accepted (Origin null as
  // Chromium sends it under no-referrer, or the real origin as other clients do).
  for (const origin of ['null', operator.origin]) {
    // The set the confirmation showed (its digest) comes back with the form.
    const confirmation = await operator.get(`outboxes/${db.schema}/dead-letters/discard?scope=filter&key=k4`);
    const seen = /name="seen" value="([^"]+)"/.exec(confirmation.body)?.[1];
    assert.ok(seen, 'the confirmation carries the set it showed');
    const ok = await operator.post(`outboxes/${db.schema}/dead-letters/discard`, { scope: 'filter', key: 'k4', expected: '1', confirm: 'yes', seen }, { headers: { origin } });
    assert.equal(ok.status, 303, ok.body.slice(0, 300));
    await makeDeadLetter(db, { key: 'k4', policy: 'skip' });
  }
});

test('integration: security headers on every response; static files are what their integrity says; the session cookie is HttpOnly, SameSite=Strict, scoped to the prefix, Secure over https', async () => {
  const c = await consoleWith({ pathPrefix: '/outbox' });
  const operator = await loggedIn(c, OPERATOR);
  const page = await operator.get(`outboxes/${db.schema}/`);
  const css = /<link rel="stylesheet" href="([^"]+)" integrity="([^"]+)">/.exec(page.body)!;
  const js = /<script src="([^"]+)" integrity="([^"]+)" defer><\/script>/.exec(page.body)!;
  const responses = {
    page,
    notFound: await operator.get('outboxes/nope/'),
    badRequest: await operator.get(`outboxes/${db.schema}/dead-letters?policy=drop`),
    forbidden: await operator.post(`outboxes/${db.schema}/dead-letters/discard`, {}, { csrf: false }),
    redirect: await operator.get('/outbox'),
    login: await client(c).get('login'),
    json: await operator.get(`outboxes/${db.schema}/jobs/none.json`),
    healthz: await client(c).get('healthz'),
    css: await operator.get(css[1]!),
    js: await operator.get(js[1]!),
    outside: await operator.get('/elsewhere'),
  };
  for (const [what, r] of Object.entries(responses)) {
    assert.equal(r.headers.get('content-security-policy'), CONTENT_SECURITY_POLICY, what);
    assert.equal(r.headers.get('x-content-type-options'), 'nosniff', what);
    assert.equal(r.headers.get('referrer-policy'), 'no-referrer', what);
    assert.equal(r.headers.get('x-frame-options'), 'DENY', what);
  }
  assert.equal(CONTENT_SECURITY_POLICY, "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'");
  assert.deepEqual([responses.notFound.status, responses.badRequest.status, responses.forbidden.status, responses.json.status, responses.outside.status], [404, 400, 403, 404, 404]);
  for (const [what, r, m] of [['css', responses.css, css], ['js', responses.js, js]] as const) {
    assert.equal(r.status, 200, what);
    assert.equal(`sha256-${createHash('sha256').update(r.body).digest('base64')}`, m[2], `${what}: the integrity attribute matches the file`);
    assert.match(r.headers.get('cache-control')!, /immutable/);
  }
  assert.match(responses.css.headers.get('content-type')!, /^text\/css/);
  assert.match(responses.js.headers.get('content-type')!, /^text\/javascript/);
  assert.doesNotMatch(page.body, /<script>|\sstyle="|\son[a-z]+="/, 'no inline script, style or handler');
  for (const r of [page, responses.login, responses.notFound]) assert.equal(r.headers.get('cache-control'), 'no-store');
  assert.equal((await fetch(c.url, { method: 'PUT' })).status, 405);

  const plain = await client(c).post('login', { username: OPERATOR.name, password: OPERATOR.password }, { csrf: false });
  assert.match(plain.headers.get('set-cookie')!, /^outbox_console=[\w-]{43}; Path=\/outbox; HttpOnly; SameSite=Strict$/);
  const proxied = await client(c).post('login', { username: OPERATOR.name, password: OPERATOR.password }, { csrf: false, headers: { 'x-forwarded-proto': 'https' } });
  assert.match(proxied.headers.get('set-cookie')!, /^__Secure-outbox_console=[\w-]{43}; Path=\/outbox; HttpOnly; SameSite=Strict; Secure$/);

  // Behind a proxy with --public-origin https://…: Secure cookies, and POSTs only from that origin.
  const behind = await consoleWith({ publicOrigin: 'https://ops.example.com' });
  const b = client(behind);
  const refused = await b.post('login', { username: OPERATOR.name, password: OPERATOR.password }, { csrf: false, headers: { origin: b.origin } });
  assert.equal(refused.status, 403, 'an Origin that is not the public origin');
  const accepted = await b.post('login', { username: OPERATOR.name, password: OPERATOR.password }, { csrf: false, headers: { origin: 'https://ops.example.com' } });
  assert.equal(accepted.status, 303);
  assert.match(accepted.headers.get('set-cookie')!, /^__Secure-outbox_console=.*; Secure$/);
});

test('integration: a database role that may only read: every page renders; replay, discard and unpark are 403 with a clear message, nothing changes, each audited', async () => {
  const script = await roleScript(db.schema, { relayRole: unused[0], consumerRole: unused[1], viewerRole: viewerGroup, operatorRole: unused[2] });
  await db.pool.query(script);
  await db.pool.query(`CREATE ROLE "${viewerLogin}" LOGIN IN ROLE "${viewerGroup}"`);
  const url = new URL(db.databaseUrl);
  url.username = viewerLogin;
  url.password = DB_SECRET;
  const c = await consoleWith({ databaseUrl: url.toString() });
  const operator = await loggedIn(c, OPERATOR);
  const base = `outboxes/${db.schema}/`;
  const id = await firstDeadLetterId();
  for (const path of ['', 'dead-letters', `dead-letters/${id}`, 'parked-keys', 'jobs', `dead-letters/replay?scope=ids&id=${id}`, 'dead-letters/discard?scope=all', 'parked-keys/unpark?topic=orders&key=k0']) {
    const page = await operator.get(`${base}${path}`);
    assert.equal(page.status, 200, `${path}: ${page.body.slice(0, 300)}`);
  }
  const before_ = await snapshot();
  for (const [path, form] of [
    ['dead-letters/replay', { scope: 'ids', id, expected: '1', rate: '10' }],
    ['dead-letters/discard', { scope: 'ids', id, expected: '1', confirm: 'yes' }],
    ['parked-keys/unpark', { topic: 'orders', key: 'k0' }],
  ] as const) {
    const r = await operator.post(`${base}${path}`, form);
    assert.equal(r.status, 403, `${path}: ${r.body.slice(0, 300)}`);
    assert.match(r.body, /Not allowed by the database/);
    assert.match(r.body, /may read but not do this/);
    assert.match(r.body, new RegExp(viewerLogin), 'names the role');
    assert.match(r.body, /nothing was changed/i);
  }
  assert.deepEqual(await snapshot(), before_);
  const refused = auditLines(logs.entries()).filter((a) => a.user === OPERATOR.name && a.outcome === 'refused' && /may read but not/.test(String(a.detail)));
  assert.deepEqual(refused.map((a) => a.action).sort(), ['discard', 'replay.start', 'unpark']);
  assert.equal(auditLines(logs.entries()).filter((a) => a.action === 'replay' && a.outcome === 'failed').length, 0, 'one line for the refused replay, not two');
});

test('integration: no secret in any page, header or log line: not the database password, not a user password (also when a database is down)', async () => {
  const down = new URL(secretUrl);
  down.port = '1';
  const c = await consoleWith({
    databaseUrl: undefined,
    schema: undefined,
    outboxes: [
      { name: 'up', databaseUrl: secretUrl, schema: db.schema },
      { name: 'down', databaseUrl: down.toString(), schema: db.schema },
    ],
  });
  const operator = await loggedIn(c, OPERATOR);
  const start = await operator.get('');
  assert.match(start.body, /<span class="badge bad">unavailable<\/span>/, 'the outbox that is down is said to be');
  const failing = await operator.get('outboxes/down/');
  assert.equal(failing.status, 503);
  assert.match(failing.body, /Cannot reach the database of outbox down/);
  for (const path of ['outboxes/up/', 'outboxes/up/dead-letters', 'outboxes/down/dead-letters', 'outboxes/up/parked-keys']) await operator.get(path);
  await operator.post('outboxes/up/dead-letters/discard', { scope: 'ids', id: await firstDeadLetterId(), expected: '1' }); // no box ticked: 400
  const secrets = [DB_SECRET, encodeURIComponent(DB_SECRET), OPERATOR.password, VIEWER.password, secretUrl];
  const seen = clients.flatMap((x) => x.seen);
  assert.ok(seen.length > 15, `searched ${seen.length} responses (with those of the tests before, when the file runs whole)`);
  assert.ok(logs.lines.length > 5, `searched ${logs.lines.length} log lines`);
  for (const secret of secrets) {
    assert.ok(!seen.some((body) => body.includes(secret)), 'a secret in a response');
    assert.ok(!logs.lines.some((line) => line.includes(secret)), 'a secret in the log');
  }
  assert.ok(logs.lines.some((l) => /cannot read an outbox for the start page/.test(l)), 'the failure is logged, without the URL');
});
