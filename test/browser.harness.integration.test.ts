import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { docScreenshot, launchBrowser, pngSize, type TestBrowser } from './helpers/browser.js';
import { listenOnLoopback } from './helpers/loopback.js';
import { gate } from './helpers/wait.js';

// The browser harness (test/helpers/browser.ts) on this machine: Debian's Chromium, installed
// by scripts/chromium-install.sh when missing, driven by playwright-core against a server
// on loopback that sends a strict Content-Security-Policy, the way the operator console
// will be tested: with the keyboard only, as a person without a mouse would.

const CSP = "default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

const FORM = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Harness form</title><link rel="stylesheet" href="/style.css"></head>
<body>
<main>
<h1>Harness form</h1>
<form method="post" action="/notes">
<label for="note">Note</label>
<input id="note" name="note" type="text" autocomplete="off">
<button type="submit">Save note</button>
</form>
<p id="inline-marker">inline script did not run</p>
<script>document.getElementById('inline-marker').textContent = 'inline script ran';</script>
</main>
</body>
</html>
`;
const STYLE = 'body { font: 16px sans-serif; margin: 2rem; } input, button { font: inherit; margin-left: 0.5rem; } button:focus { outline: 3px solid #1a5fb4; }';

let server: Server;
let origin: string;
const posts: Array<{ contentType: string | undefined; body: string }> = [];
let posted = gate<void>();
let browser: TestBrowser;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}

before(async () => {
  server = createServer((req, res) => {
    const send = (status: number, type: string, body: string): void => {
      res.writeHead(status, { 'content-type': type, 'content-security-policy': CSP, 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' });
      res.end(body);
    };
    if (req.method === 'GET' && req.url === '/') return send(200, 'text/html; charset=utf-8', FORM);
    if (req.method === 'GET' && req.url === '/style.css') return send(200, 'text/css; charset=utf-8', STYLE);
    if (req.method === 'POST' && req.url === '/notes') {
      void readBody(req).then((body) => {
        posts.push({ contentType: req.headers['content-type'], body });
        const note = new URLSearchParams(body).get('note') ?? '';
        const escaped = note.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
        send(200, 'text/html; charset=utf-8', `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Saved</title></head><body><p role="status">Saved: ${escaped}</p></body></html>`);
        posted.open();
      });
      return;
    }
    send(404, 'text/plain; charset=utf-8', 'not found');
  });
  origin = `http://127.0.0.1:${await listenOnLoopback(server)}`;
  // Installs Chromium on first use (root on CI); the script says on stderr what it did.
  browser = await launchBrowser({ viewport: { width: 800, height: 600 } });
});

after(async () => {
  await browser?.close();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

test('integration: Chromium fills and sends a form under a strict CSP with the keyboard only', async () => {
  const { page } = browser;
  const violations: string[] = [];
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
  });
  const response = await page.goto(`${origin}/`);
  assert.equal(response?.status(), 200);
  assert.equal(response?.headers()['content-security-policy'], CSP);
  assert.equal(await page.title(), 'Harness form');

  // The CSP is in force: the inline script was refused (and the refusal reported), the
  // stylesheet from 'self' applied.
  assert.equal(await page.locator('#inline-marker').textContent(), 'inline script did not run');
  assert.ok(violations.some((v) => /script/i.test(v)), `a CSP violation was reported: ${JSON.stringify(violations)}`);
  // (Page code as strings: the tests compile without the DOM's types.)
  assert.equal(await page.evaluate<string>('getComputedStyle(document.body).marginTop'), '32px');

  // The label names the input: what a screen reader announces.
  assert.equal(await page.getByLabel('Note').getAttribute('id'), 'note');

  const focused = (): Promise<string> =>
    page.evaluate<string>(`(() => {
      const e = document.activeElement;
      return e ? e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + ':' + (e.textContent || '').trim() : 'none';
    })()`);
  await page.keyboard.press('Tab');
  assert.equal(await focused(), 'input#note:');
  await page.keyboard.type('hello from the keyboard & <harness>');
  await page.keyboard.press('Tab');
  assert.equal(await focused(), 'button:Save note');
  const navigated = page.waitForURL(`${origin}/notes`);
  await page.keyboard.press('Enter');
  await posted.promise;
  await navigated;

  assert.deepEqual(posts, [{ contentType: 'application/x-www-form-urlencoded', body: 'note=hello+from+the+keyboard+%26+%3Charness%3E' }]);
  assert.equal(await page.getByRole('status').textContent(), 'Saved: hello from the keyboard & <harness>');
});

test('integration: a screenshot is a PNG of the viewport, written only when asked', async () => {
  const { page } = browser;
  await page.goto(`${origin}/`);
  const dir = mkdtempSync(join(tmpdir(), 'harness-shots-'));
  try {
    const kept = await docScreenshot(page, 'harness-form', { dir, write: true });
    assert.deepEqual({ width: kept.width, height: kept.height }, { width: 800, height: 600 });
    assert.equal(kept.path, join(dir, 'harness-form.png'));
    const file = readFileSync(kept.path!);
    assert.ok(file.equals(kept.png));
    assert.deepEqual(pngSize(file), { width: 800, height: 600 });
    // Not one colour: the form was drawn.
    assert.ok(kept.png.length > 2_000, `${kept.png.length} bytes`);

    const notKept = await docScreenshot(page, 'harness-form-again', { dir, write: false });
    assert.equal(notKept.path, null);
    assert.deepEqual(pngSize(notKept.png), { width: 800, height: 600 });
    assert.equal(existsSync(join(dir, 'harness-form-again.png')), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.throws(() => pngSize(Buffer.from('GIF89a not a png at all')), /not a PNG/);
});

test('integration: the browser profile is a fresh temporary directory, removed on close', async () => {
  const second = await launchBrowser();
  assert.ok(second.userDataDir.startsWith(tmpdir()), second.userDataDir);
  assert.notEqual(second.userDataDir, browser.userDataDir);
  assert.equal(existsSync(second.userDataDir), true);
  assert.equal(await second.page.evaluate<boolean>('navigator.webdriver'), true);
  await second.close();
  await second.close();
  assert.equal(existsSync(second.userDataDir), false);
});
