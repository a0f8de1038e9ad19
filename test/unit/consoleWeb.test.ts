import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { html, escapeHtml } from '../../src/console/web/html.js';
import { parseUsers } from '../../src/console/web/users.js';
import { hashPassword, parseStoredPassword, verifyPassword } from '../../src/console/web/passwords.js';
import { csrfMatches, LoginThrottle, SessionStore, SESSION_IDLE_MS, MAX_FAILURES } from '../../src/console/web/sessions.js';
import { crossOriginProblem } from '../../src/console/web/security.js';
import { filterFrom, filterParams, idsFrom } from '../../src/console/web/filters.js';
import { selectionFrom } from '../../src/console/web/selection.js';
import { flowChart } from '../../src/console/web/chart.js';
import { hexDump, formatAge, formatCount } from '../../src/console/web/format.js';
import { consolePathPrefix, consolePublicOrigin, consoleUsers, parseListen } from '../../src/console/web/options.js';
import { readSetting } from '../../src/shared/settings.js';
import { ConfigError } from '../../src/shared/errors.js';
import { HttpError } from '../../src/console/web/http.js';

// The console's web layer, the parts that need no server: escaping, users and passwords,
// sessions and CSRF tokens, the origin check, filters, the chart.

test('html escapes every interpolation, nested Html stays markup, arrays join, null/undefined/false vanish', () => {
  const evil = `<script>alert("x")</script>&'\``;
  const out = html`<td title="${evil}">${evil}${html`<b>${'1<2'}</b>`}${[1, '<i>', null, undefined, false]}</td>`.text;
  assert.equal(out, `<td title="${escapeHtml(evil)}">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;&#96;<b>1&lt;2</b>1&lt;i&gt;</td>`);
  assert.doesNotMatch(out, /<script>/);
});

test('users: name:role:password lines; comments and blanks skipped; errors name the line, never quote it', async () => {
  const hash = await hashPassword('a long passphrase');
  const users = parseUsers(`# who may log in\n\nalice:operator:${hash}\nbob:viewer:plain:text:with:colons\n`, 'F');
  assert.deepEqual(users.map((u) => [u.name, u.role, u.password.kind]), [['alice', 'operator', 'scrypt'], ['bob', 'viewer', 'plain']]);
  assert.equal((users[1]!.password as { text: string }).text, 'plain:text:with:colons');
  const bad = (text: string): string => {
    try {
      parseUsers(text, 'F');
    } catch (error) {
      assert.ok(error instanceof ConfigError);
      return error.message;
    }
    assert.fail('accepted');
  };
  assert.match(bad('carol:admin:secretsecret'), /^F, line 1: user carol: "admin" is not a role/);
  assert.match(bad('carol:viewer:short'), /line 1: user carol has a plain-text password shorter than 8/);
  assert.match(bad('x:viewer:aaaaaaaa\nx:operator:bbbbbbbb'), /line 2: user x is listed twice/);
  assert.match(bad('carol:viewer:scrypt$1$2$3$salt$key'), /malformed scrypt hash/);
  assert.match(bad('# nobody\n'), /lists no user/);
  const noSeparator = bad('justonesecretword');
  assert.match(noSeparator, /line 1: is not name:role:password/);
  assert.doesNotMatch(noSeparator, /justonesecretword/);
  assert.doesNotMatch(bad('pass word:viewer:hunter2hunter2'), /hunter2/);
});

test('passwords: a scrypt hash verifies its password only; plain text too; an unknown user never', async () => {
  const stored = parseStoredPassword(await hashPassword('correct horse'));
  assert.ok(!('problem' in stored));
  assert.equal(await verifyPassword('correct horse', stored), true);
  assert.equal(await verifyPassword('correct horsf', stored), false);
  const plain = parseStoredPassword('plain password');
  assert.ok(!('problem' in plain));
  assert.equal(await verifyPassword('plain password', plain), true);
  assert.equal(await verifyPassword('plain passwor', plain), false);
  assert.equal(await verifyPassword('anything', undefined), false);
});

test('sessions: random ids, idle expiry, end; CSRF token compared in constant time', () => {
  let now = 1_000_000;
  const store = new SessionStore(() => now);
  const s = store.create('alice', 'operator');
  assert.equal(s.id.length, 43);
  assert.notEqual(s.id, s.csrfToken);
  assert.equal(store.find(s.id), s);
  assert.equal(store.find(`${s.id}x`), undefined);
  assert.equal(store.find(undefined), undefined);
  assert.equal(csrfMatches(s, s.csrfToken), true);
  assert.equal(csrfMatches(s, `${s.csrfToken}x`), false);
  assert.equal(csrfMatches(s, undefined), false);
  now += SESSION_IDLE_MS - 1;
  assert.equal(store.find(s.id), s, 'used within the idle time: still there');
  now += SESSION_IDLE_MS + 1;
  assert.equal(store.find(s.id), undefined, 'idle too long: gone');
  const t = store.create('bob', 'viewer');
  store.end(t);
  assert.equal(store.find(t.id), undefined);
});

test('login throttle: refuses a name after MAX_FAILURES failures in a minute, until a minute after the last', () => {
  let now = 0;
  const t = new LoginThrottle(() => now);
  for (let i = 0; i < MAX_FAILURES - 1; i++) t.failed('alice', `10.0.0.${i}`);
  assert.equal(t.waitMs('alice', '10.9.9.9'), 0);
  t.failed('alice', '10.0.0.9');
  assert.equal(t.waitMs('alice', '10.9.9.9'), 60_000, 'per name, from any address');
  assert.equal(t.waitMs('bob', '10.9.9.9'), 0, 'per name');
  now += 60_000;
  assert.equal(t.waitMs('alice', '10.9.9.9'), 0);
  t.failed('bob', '10.9.9.9');
  t.succeeded('bob');
  assert.equal(t.waitMs('bob', '10.9.9.9'), 0);
});

function request(headers: Record<string, string>): IncomingMessage {
  return { headers } as unknown as IncomingMessage;
}

test('origin check: same origin passes, another site or origin is refused, a non-browser client is left to the CSRF token', () => {
  assert.equal(crossOriginProblem(request({ host: '127.0.0.1:9465', origin: 'http://127.0.0.1:9465', 'sec-fetch-site': 'same-origin' }), ''), undefined);
  assert.equal(crossOriginProblem(request({ host: '127.0.0.1:9465' }), ''), undefined);
  assert.match(crossOriginProblem(request({ host: '127.0.0.1:9465', origin: 'http://evil.example' }), '')!, /another origin/);
  assert.match(crossOriginProblem(request({ host: '127.0.0.1:9465', 'sec-fetch-site': 'cross-site' }), '')!, /another site/);
  assert.match(crossOriginProblem(request({ host: 'x', 'sec-fetch-site': 'same-site' }), '')!, /another site/);
  assert.match(crossOriginProblem(request({ host: 'x', origin: 'null' }), '')!, /opaque/);
  // Referrer-Policy no-referrer: a browser's own form POST says Origin null, and same-origin.
  assert.equal(crossOriginProblem(request({ host: 'x', origin: 'null', 'sec-fetch-site': 'same-origin' }), ''), undefined);
  assert.match(crossOriginProblem(request({ host: 'x', origin: 'null', 'sec-fetch-site': 'cross-site' }), '')!, /another site/);
  // Behind a proxy: the forwarded host, or the configured public origin.
  assert.equal(crossOriginProblem(request({ host: '127.0.0.1:9465', 'x-forwarded-host': 'ops.example.com', origin: 'https://ops.example.com' }), ''), undefined);
  assert.equal(crossOriginProblem(request({ host: '127.0.0.1:9465', origin: 'https://ops.example.com' }), 'https://ops.example.com'), undefined);
  assert.match(crossOriginProblem(request({ host: 'ops.example.com', origin: 'http://ops.example.com' }), 'https://ops.example.com')!, /--public-origin/);
});

test('filters: empty fields unset, values checked by the CLI rules, round trip through query parameters', () => {
  const f = filterFrom(new URLSearchParams({ topic: ' orders ', key: ' k ', reason: '', errorName: 'MESSAGE_TOO_LARGE', since: '2h', policy: 'park' }));
  assert.deepEqual(f, { topic: 'orders', key: ' k ', errorName: 'MESSAGE_TOO_LARGE', since: '2h', policy: 'park' });
  assert.deepEqual(filterFrom(filterParams(f)), f);
  assert.throws(() => filterFrom(new URLSearchParams({ since: 'yesterday' })), (e: unknown) => e instanceof HttpError && e.status === 400 && /"since" time/.test(e.message));
  assert.throws(() => filterFrom(new URLSearchParams({ since: '1h', until: '2h' })), (e: unknown) => e instanceof HttpError && /not after since/.test(e.message));
  assert.throws(() => filterFrom(new URLSearchParams({ policy: 'drop' })), HttpError);
  assert.deepEqual(idsFrom(new URLSearchParams([['id', '3'], ['id', '1,2'], ['id', '3']])), [1, 2, 3]);
  assert.throws(() => idsFrom(new URLSearchParams([['id', '0']])), HttpError);
  assert.throws(() => idsFrom(new URLSearchParams([['id', '1e3']])), HttpError);
  assert.throws(() => idsFrom(new URLSearchParams()), HttpError);
});

test('selection: ids, a non-empty filter, or all (never an empty filter taken for all)', () => {
  assert.deepEqual(selectionFrom(new URLSearchParams([['scope', 'ids'], ['id', '5']])), { scope: 'ids', ids: [5] });
  assert.deepEqual(selectionFrom(new URLSearchParams({ scope: 'filter', topic: 't' })), { scope: 'filter', filter: { topic: 't' } });
  assert.deepEqual(selectionFrom(new URLSearchParams({ scope: 'all' })), { scope: 'all' });
  assert.throws(() => selectionFrom(new URLSearchParams({ scope: 'filter' })), /filter is empty/);
  assert.throws(() => selectionFrom(new URLSearchParams({ scope: 'all', topic: 't' })), /takes no filter/);
  assert.throws(() => selectionFrom(new URLSearchParams({ topic: 't' })), /scope/);
});

test('chart: one point per minute, scaled to a round maximum, with the numbers as a table', () => {
  const start = Date.UTC(2026, 0, 1, 10, 0);
  const flow = Array.from({ length: 60 }, (_, i) => ({ minute: new Date(start + i * 60_000), ingress: i === 59 ? 130 : 10, egress: 5, deadLettered: i === 0 ? 1 : 0 }));
  const svg = flowChart('c', flow).text;
  const ingress = /class="line ingress" points="([^"]+)"/.exec(svg)![1]!.split(' ');
  assert.equal(ingress.length, 60);
  assert.match(svg, /up to 200 rows a minute/);
  assert.match(svg, /Last hour: 720 rows in, 300 out, 1 dead-lettered/);
  assert.equal((svg.match(/<tr><th scope="row">/g) ?? []).length, 60);
  assert.doesNotMatch(svg, /style=/, 'no inline style: the CSP allows none');
  // Minutes no relay recorded are gaps, not zeros: the line breaks, the table says so.
  const gappy = flowChart('g', flow.map((m, i) => ({ ...m, recorded: i < 20 || i >= 40 }))).text;
  assert.equal((gappy.match(/class="line ingress"/g) ?? []).length, 2);
  assert.match(gappy, /Last hour: 520 rows in, 200 out, 1 dead-lettered.*Only 40 of 60 minutes recorded/);
  assert.equal((gappy.match(/not recorded<\/td>/g) ?? []).length, 20);
});

test('format: ages, capped counts, hex dump', () => {
  assert.equal(formatAge(42), '42 s');
  assert.equal(formatAge(185), '3 min 5 s');
  assert.equal(formatAge(7_800), '2 h 10 min');
  assert.equal(formatAge(277_200), '3 d 5 h');
  assert.equal(formatCount({ count: 10_000, capped: true }), '10,000+');
  assert.equal(formatCount({ count: 10_000, capped: true, estimate: 1_234_567 }), 'about 1,234,567');
  assert.equal(formatCount({ count: 12, capped: false }), '12');
  assert.equal(hexDump(Buffer.from('{"a":1}\x00\xff')), '00000000  7b 22 61 22 3a 31 7d 00 c3 bf                    |{"a":1}...|');
  assert.match(hexDump(Buffer.alloc(40), 16), /^00000000 .*\n… 24 more bytes not shown$/);
});

test('settings: listen defaults to loopback; prefix and origin are checked; users is a secret read from env or _FILE', () => {
  assert.deepEqual(parseListen('127.0.0.1:9465'), { host: '127.0.0.1', port: 9465 });
  assert.equal(readSetting(consolePathPrefix, '/ops/', {}), '/ops');
  assert.equal(readSetting(consolePathPrefix, '/', {}), '');
  assert.throws(() => readSetting(consolePathPrefix, 'ops', {}), /--path-prefix: "ops" is not a path prefix/);
  assert.throws(() => readSetting(consolePathPrefix, '/a/../b', {}), /not a path prefix/);
  assert.equal(readSetting(consolePublicOrigin, 'https://ops.example.com/', {}), 'https://ops.example.com');
  assert.throws(() => readSetting(consolePublicOrigin, 'https://ops.example.com/outbox', {}), /no path/);
  assert.equal(consoleUsers.flag, undefined, 'never a flag');
  assert.throws(
    () => readSetting(consoleUsers, undefined, { OUTBOX_CONSOLE_USERS: 'alice:root:hunter2hunter2' }),
    (e: unknown) => e instanceof ConfigError && /OUTBOX_CONSOLE_USERS: line 1: user alice: "root" is not a role/.test(e.message) && !e.message.includes('hunter2'),
  );
});
