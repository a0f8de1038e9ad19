import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { startConsole, type OperatorConsole } from '../src/console/console.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { writeCommitted } from './helpers/outbox.js';
import { makeDeadLetter } from './helpers/console.js';
import { waitFor } from './helpers/wait.js';
import { launchBrowser, type TestBrowser } from './helpers/browser.js';
import { csrfTokenOf, focused, logInWithForm, logOut, lowContrastText, postFromPage, recordServedPages, tabTo, type ServedPages } from './helpers/consoleBrowser.js';

// Who may do what in the console, and how, in Chromium against real Postgres: a viewer
// sees every page and no action, and a POST forged from its own session, CSRF token and
// all, is refused; an operator's POST without the token is refused, with it accepted; no
// page the browser was served holds the database's password or a user's. And the console
// with the keyboard only: log in, reach the dead letters, filter them and open one with
// Tab, Shift+Tab, typing and Enter, the focus ring drawn at every stop. The main flow
// (real relay, replay, screenshots) is console.browser.integration.test.ts. And with
// JavaScript off: every action still works with plain forms and links.

const DB_SECRET = `dbpw-${uniqueName('s')}`;
const OPERATOR = { name: 'otto', password: `operator-${uniqueName('pw')}` };
const VIEWER = { name: 'vivian', password: `viewer-${uniqueName('pw')}` };
const TOPIC = 'orders';

let db: TestSchema;
let ops: OperatorConsole;
let browser: TestBrowser;
let served: ServedPages;
/** page.content() of every page visited, besides what was served. */
const rendered: string[] = [];
let parker: { id: number; messageId: string };
const skipped: Array<{ id: number; messageId: string }> = [];
const cleanups: Array<() => Promise<unknown>> = [];

before(async () => {
  db = await createTestSchema('console_access');
  cleanups.push(() => db.drop());
  parker = await makeDeadLetter(db, { topic: TOPIC, key: 'held', policy: 'park' });
  // A row of the parked key waits behind it (no relay runs here: it stays unsent).
  await writeCommitted(db, [{ topic: TOPIC, key: 'held', payload: { n: 2 } }]);
  for (let i = 0; i < 4; i++) skipped.push(await makeDeadLetter(db, { topic: TOPIC, key: `k${i}`, policy: 'skip', ago: i === 3 ? '2 hours' : '0 seconds' }));
  // The console reaches Postgres with a password in its URL (trust auth ignores it): it must never be shown.
  const url = new URL(db.databaseUrl);
  url.password = DB_SECRET;
  ops = await startConsole({
    port: 0,
    databaseUrl: url.toString(),
    schema: db.schema,
    users: `${OPERATOR.name}:operator:${OPERATOR.password}\n${VIEWER.name}:viewer:${VIEWER.password}\n`,
  });
  cleanups.push(() => ops.close());
  browser = await launchBrowser();
  cleanups.push(() => browser.close());
  served = recordServedPages(browser.page);
});

after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

const outboxUrl = (rest = ''): string => `${ops.url}outboxes/${db.schema}/${rest}`;
const deadLetterCount = async (): Promise<number> => (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters`)).rows[0].n;
const parkedCount = async (): Promise<number> => (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_parked_keys`)).rows[0].n;

/** Text drawn with less than 4.5:1 contrast, on any page visited (docs/console.md says none is). */
const contrast: string[] = [];

/** Go to a page of the console and keep what it rendered, and its contrast problems; its status. */
async function visit(path: string): Promise<number> {
  const response = await browser.page.goto(outboxUrl(path));
  rendered.push(await browser.page.content());
  contrast.push(...(await lowContrastText(browser.page)).map((p) => `${path || 'overview'}: ${p}`));
  return response?.status() ?? 0;
}

test('integration: a viewer sees every page but no action, and a POST forged from its session with its CSRF token is refused; an operator POST without the token is refused, with it accepted; no page holds a password; every text at 4.5:1 contrast or more', async () => {
  const { page } = browser;
  await page.goto(ops.url);
  await logInWithForm(page, VIEWER.name, VIEWER.password);
  assert.match(await page.locator('header.site .who').innerText(), new RegExp(`Signed in as ${VIEWER.name} \\(viewer\\)`));
  // (The navigation's "Replay jobs" is a page to read.)
  const actions = /^(replay|discard|unpark|cancel)(?! jobs$)/i;
  for (const path of ['', 'dead-letters', `dead-letters/${parker.id}`, 'parked-keys', 'jobs']) {
    assert.equal(await visit(path), 200, path);
    assert.equal(await page.getByRole('button', { name: actions }).count(), 0, `no action button on ${path || 'the overview'}`);
    assert.equal(await page.getByRole('link', { name: actions }).count(), 0, `no action link on ${path || 'the overview'}`);
    assert.equal(await page.getByRole('checkbox').count(), 0, `nothing to select on ${path || 'the overview'}`);
  }
  // The rows are there to be read: the viewer is not shown an empty console.
  await visit('dead-letters');
  assert.equal(await page.getByRole('link', { name: /^Dead letter \d+$/ }).count(), 5);
  await visit('parked-keys');
  assert.equal(await page.getByRole('cell', { name: 'held', exact: true }).count(), 1);
  // A confirmation page is an operator's.
  assert.equal(await visit('dead-letters/replay?scope=all'), 403);
  assert.match(await page.getByRole('alert').innerText(), /Only an operator may do this/);

  // Forged from the viewer's own page: its cookie, same origin, a valid token. Refused.
  await visit('dead-letters');
  const viewerToken = await csrfTokenOf(page);
  const base = `/outboxes/${db.schema}`;
  const forged = [
    [`${base}/dead-letters/discard`, { scope: 'ids', id: String(skipped[0]!.id), expected: '1', confirm: 'yes' }],
    [`${base}/dead-letters/replay`, { scope: 'all', expected: '5', rate: '100' }],
    [`${base}/parked-keys/unpark`, { topic: TOPIC, key: 'held' }],
  ] as const;
  for (const [path, form] of forged) {
    const r = await postFromPage(page, path, { ...form, _csrf: viewerToken });
    assert.equal(r.status, 403, `${path} as the viewer: ${r.body.slice(0, 300)}`);
    assert.match(r.body, /Only an operator may do this; you are logged in as a viewer\. Nothing was changed\./);
  }
  assert.deepEqual([await deadLetterCount(), await parkedCount()], [5, 1], 'nothing changed');

  await logOut(page);
  await logInWithForm(page, OPERATOR.name, OPERATOR.password);
  await visit('dead-letters');
  assert.ok(await page.getByRole('link', { name: /^Replay all 5 matching/ }).isVisible(), 'the operator has the actions');
  const operatorToken = await csrfTokenOf(page);
  assert.notEqual(operatorToken, viewerToken);
  const discardOne = { scope: 'ids', id: String(skipped[0]!.id), expected: '1', confirm: 'yes' };
  for (const [what, token] of [['no token', undefined], ['the viewer session’s token', viewerToken], ['a made-up token', 'A'.repeat(43)]] as const) {
    const r = await postFromPage(page, `${base}/dead-letters/discard`, token === undefined ? discardOne : { ...discardOne, _csrf: token });
    assert.equal(r.status, 403, `with ${what}: ${r.body.slice(0, 300)}`);
    assert.match(r.body, /missing its security token or it is stale/);
  }
  assert.equal(await deadLetterCount(), 5, 'nothing discarded');
  // The same POST with the session's token goes through: the token was the only thing missing.
  const accepted = await postFromPage(page, `${base}/dead-letters/discard`, { ...discardOne, _csrf: operatorToken });
  assert.equal(accepted.status, 200);
  assert.equal(new URL(accepted.url).pathname, `${base}/dead-letters`);
  assert.match(accepted.body, /Discarded 1 dead letter; released 0 parked keys\./);
  assert.equal(await deadLetterCount(), 4);

  for (const path of ['', 'dead-letters', `dead-letters/${parker.id}`, `dead-letters/replay?scope=ids&id=${parker.id}`, 'dead-letters/discard?scope=all', 'parked-keys', `parked-keys/unpark?topic=${TOPIC}&key=held`, 'jobs']) {
    assert.equal(await visit(path), 200, path);
  }
  await logOut(page);
  rendered.push(await page.content());
  await served.settled();
  const bodies = [...served.pages.map((p) => p.body), ...rendered];
  assert.ok(served.pages.length >= 25, `${served.pages.length} pages served`);
  assert.ok(served.pages.some((p) => p.body.includes(`Signed in as <strong>${OPERATOR.name}</strong>`)), 'the pages were read (the user is named in them)');
  for (const secret of [DB_SECRET, OPERATOR.password, VIEWER.password]) {
    const found = served.pages.find((p) => p.body.includes(secret))?.url ?? (rendered.some((b) => b.includes(secret)) ? 'a rendered page' : undefined);
    assert.equal(found, undefined, `a password appears in ${found}`);
  }
  assert.ok(bodies.every((b) => !b.includes('postgres://')), 'no connection string');
  contrast.push(...(await lowContrastText(page)).map((p) => `login: ${p}`));
  assert.deepEqual(contrast, [], 'every text at 4.5:1 contrast or more');
});

test('integration: with the keyboard only: log in, reach the dead letters, filter them and open one (Tab, Shift+Tab, typing, Enter); the focus ring is drawn at every stop; a skip link and landmarks', async () => {
  const { page } = browser;
  await browser.context.clearCookies();
  await page.goto(ops.url);
  assert.equal(new URL(page.url()).pathname, '/login');
  // The first stop is the skip link, shown when focused.
  const skip = await tabTo(page, 'the skip link', (f) => f.tag === 'a', { maxPresses: 1 });
  assert.equal(skip.name, 'Skip to content');
  await tabTo(page, 'the user name', (f) => f.id === 'username');
  await page.keyboard.type(OPERATOR.name);
  await tabTo(page, 'the password', (f) => f.id === 'password', { maxPresses: 1 });
  await page.keyboard.type(OPERATOR.password);
  await Promise.all([page.waitForURL(outboxUrl()), page.keyboard.press('Enter')]);

  // The overview: landmarks, and the skip link leads into the main content.
  assert.equal(await page.getByRole('banner').count(), 1);
  assert.equal(await page.getByRole('main').count(), 1);
  assert.equal(await page.getByRole('navigation', { name: `Outbox ${db.schema}` }).count(), 1);
  await tabTo(page, 'the skip link', (f) => f.name === 'Skip to content', { maxPresses: 1 });
  await page.keyboard.press('Enter');
  assert.equal((await focused(page)).id, 'main', 'the skip link moves the focus to the main content');
  // Back up into the header's navigation.
  await tabTo(page, 'the Dead letters link', (f) => f.tag === 'a' && f.name === 'Dead letters' && f.href.endsWith('/dead-letters'), { backwards: true });
  await Promise.all([page.waitForURL(outboxUrl('dead-letters')), page.keyboard.press('Enter')]);

  // The filter form is a search landmark; typing and Enter apply it.
  assert.equal(await page.getByRole('search', { name: 'Filter dead letters' }).count(), 1);
  await tabTo(page, 'the topic field', (f) => f.id === 'f-topic');
  await page.keyboard.type(TOPIC);
  await tabTo(page, 'the since field', (f) => f.id === 'f-since');
  await page.keyboard.type('1h');
  await Promise.all([page.waitForURL(/since=1h/), page.keyboard.press('Enter')]);
  const recent = (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters WHERE topic = $1 AND dead_lettered_at >= now() - interval '1 hour'`, [TOPIC])).rows[0].n;
  assert.equal(await page.locator('main p[role="status"]').innerText(), `${recent} dead letters match topic "${TOPIC}", since time "1h".`);
  const wanted = skipped[1]!.id;
  await tabTo(page, `the link to dead letter ${wanted}`, (f) => f.name === `Dead letter ${wanted}`);
  await Promise.all([page.waitForURL(outboxUrl(`dead-letters/${wanted}`)), page.keyboard.press('Enter')]);
  assert.equal(await page.getByRole('heading', { level: 1 }).innerText(), `Dead letter ${wanted}`);
  assert.ok(await page.getByText(skipped[1]!.messageId).isVisible());
  // The payload box scrolls: it takes the focus too, with its ring.
  await tabTo(page, 'the payload', (f) => f.tag === 'pre');
});

test('integration: with JavaScript off the console still works: log in, filter, replay a selection (the job page shows its outcome on reload), unpark a key, discard with its confirmation', async () => {
  const plain = await launchBrowser({ javaScriptEnabled: false });
  cleanups.push(() => plain.close());
  const { page } = plain;
  await page.goto(ops.url);
  await logInWithForm(page, OPERATOR.name, OPERATOR.password);
  assert.equal(page.url(), outboxUrl());
  assert.equal(await page.evaluate('typeof document'), 'object');
  assert.equal(await page.locator('[data-select-all]').isVisible(), false, 'the script-only "select all" box stays hidden');

  await page.goto(outboxUrl('dead-letters'));
  await page.getByLabel(/^Topic/).fill(TOPIC);
  await Promise.all([page.waitForURL(/topic=orders/), page.getByRole('button', { name: 'Apply filter' }).click()]);
  const matching = (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters WHERE topic = $1`, [TOPIC])).rows[0].n;
  assert.equal(await page.locator('main p[role="status"]').innerText(), `${matching} dead letters match topic "${TOPIC}".`);

  // Replay one: tick it, the confirmation page (a plain GET form), then the POST.
  const replayed = skipped[2]!;
  await page.getByLabel(`Select dead letter ${replayed.id}`, { exact: true }).check();
  await Promise.all([page.waitForURL(/\/dead-letters\/replay\?/), page.getByRole('button', { name: 'Replay selected…' }).click()]);
  await page.getByLabel(/^Rate, dead letters per second/).fill('50');
  await Promise.all([page.waitForURL(/\/jobs\/[\w-]+$/), page.getByRole('button', { name: 'Replay 1 dead letter', exact: true }).click()]);
  // Nothing refreshes the page by itself: the operator reloads it.
  await waitFor('the job page showing the outcome on reload', async () => {
    await page.reload();
    return (await page.getByText('Replayed 1 of 1').count()) === 1;
  }, { timeoutMs: 10_000, intervalMs: 100 });
  const back = (await db.pool.query(`SELECT message_id::text FROM "${db.schema}".outbox WHERE id = $1`, [replayed.id])).rows;
  assert.deepEqual(back, [{ message_id: replayed.messageId }], 'moved back under its id and message id');

  // Unpark the parked key from its page.
  await page.goto(outboxUrl('parked-keys'));
  await Promise.all([page.waitForURL(/\/parked-keys\/unpark\?/), page.getByRole('link', { name: /^Unpark/ }).click()]);
  await Promise.all([page.waitForURL(outboxUrl('parked-keys')), page.getByRole('button', { name: 'Unpark this key' }).click()]);
  assert.equal(await parkedCount(), 0);

  // Discard one: the box must be ticked (the browser holds the form back without it, no script needed).
  const discarded = skipped[3]!;
  await page.goto(outboxUrl('dead-letters'));
  await page.getByLabel(`Select dead letter ${discarded.id}`, { exact: true }).check();
  await Promise.all([page.waitForURL(/\/dead-letters\/discard\?/), page.getByRole('button', { name: 'Discard selected…' }).click()]);
  await page.getByRole('button', { name: 'Discard 1 dead letter', exact: true }).click();
  assert.equal(new URL(page.url()).pathname.endsWith('/dead-letters/discard'), true, 'not sent without the box ticked');
  await page.getByRole('checkbox', { name: /^I understand: / }).check();
  await Promise.all([page.waitForURL(/\/dead-letters(\?|$)/), page.getByRole('button', { name: 'Discard 1 dead letter', exact: true }).click()]);
  const left = (await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_dead_letters WHERE id = $1`, [discarded.id])).rows[0].n;
  assert.equal(left, 0);
});
