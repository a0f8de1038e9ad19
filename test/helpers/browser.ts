import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

// A real browser for the tests of what a person sees (the operator console): Debian's
// Chromium (/usr/bin/chromium, installed by scripts/chromium-install.sh when missing),
// driven by playwright-core. playwright-core never downloads a browser of its own.

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** Where the screenshots of the docs live. */
export const DOCS_IMG = join(ROOT, 'docs/img');

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

let executable: string | undefined;
/** /usr/bin/chromium, installed by scripts/chromium-install.sh if need be (once per process; it says on stderr what it did). */
export function chromiumPath(): string {
  executable ??= execFileSync(join(ROOT, 'scripts/chromium-install.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  return executable;
}

/** The flags every test browser gets, besides playwright's own. */
export const CHROMIUM_FLAGS = [
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-proxy-server',
  // Nothing resolves but localhost and 127.0.0.1: a page under test reaches only this machine.
  '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1',
];

export interface TestBrowser {
  context: BrowserContext;
  /** The first tab, open on about:blank. */
  page: Page;
  /** The profile directory of this browser: fresh, removed by close(). */
  userDataDir: string;
  /** Close the browser and remove its profile; safe to call twice. */
  close(): Promise<void>;
}

export interface TestBrowserOptions {
  /** CSS pixels (default 1280 × 800); screenshots are this size, at a device scale of 1. */
  viewport?: { width: number; height: number };
  /** false: a browser with JavaScript off (the console's pages must work without it). */
  javaScriptEnabled?: boolean;
}

/**
 * Headless Chromium with a fresh profile in a temporary directory. The sandbox is off only
 * when running as root (Chromium refuses to start as root with it); playwright's default
 * would turn it off always.
 */
export async function launchBrowser(options: TestBrowserOptions = {}): Promise<TestBrowser> {
  const executablePath = chromiumPath();
  const userDataDir = mkdtempSync(join(tmpdir(), 'outbox-browser-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath,
      headless: true,
      chromiumSandbox: !isRoot,
      args: CHROMIUM_FLAGS,
      viewport: options.viewport ?? { width: 1280, height: 800 },
      deviceScaleFactor: 1,
      javaScriptEnabled: options.javaScriptEnabled ?? true,
      locale: 'en-US',
      timezoneId: 'UTC',
      // The tests' own servers answer on loopback; nothing else is reachable anyway.
      serviceWorkers: 'block',
    });
  } catch (error) {
    rmSync(userDataDir, { recursive: true, force: true });
    throw error;
  }
  const page = context.pages()[0] ?? (await context.newPage());
  let closed: Promise<void> | undefined;
  return {
    context,
    page,
    userDataDir,
    close: () =>
      (closed ??= context
        .close()
        .catch(() => undefined)
        .then(() => rmSync(userDataDir, { recursive: true, force: true }))),
  };
}

/** Width and height from a PNG's header; throws when `png` is not a PNG. */
export function pngSize(png: Buffer): { width: number; height: number } {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  if (png.length < 24 || !png.subarray(0, 8).equals(signature) || png.toString('latin1', 12, 16) !== 'IHDR') {
    throw new Error(`not a PNG (${png.length} bytes, starting ${png.subarray(0, 8).toString('hex')})`);
  }
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

/** OUTBOX_WRITE_SCREENSHOTS=1: the docs' screenshots are written again (see {@link docScreenshot}). */
export const WRITE_SCREENSHOTS = process.env.OUTBOX_WRITE_SCREENSHOTS === '1';

/**
 * A screenshot of the page for the docs, `docs/img/<name>.png`. The docs' pictures are
 * made only by the tests, but written only when asked (OUTBOX_WRITE_SCREENSHOTS=1, or
 * `write`): a PNG written on every run would change the committed file at each test run
 * (a time, an id on the page), and dirty every developer's tree. Otherwise it is taken and
 * checked all the same (a page that cannot be shot fails either way), and not kept.
 * Returns the PNG, its size, and the file when it was written.
 */
export async function docScreenshot(
  page: Page,
  name: string,
  options: { dir?: string; write?: boolean; fullPage?: boolean } = {},
): Promise<{ png: Buffer; width: number; height: number; path: string | null }> {
  if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) throw new Error(`screenshot name ${JSON.stringify(name)}: lower-case letters, digits and dashes`);
  // Animations stopped and the caret hidden, so the same page gives the same picture.
  const png = await page.screenshot({ type: 'png', fullPage: options.fullPage ?? false, animations: 'disabled', caret: 'hide' });
  const size = pngSize(png);
  if (!(options.write ?? WRITE_SCREENSHOTS)) return { png, ...size, path: null };
  const dir = options.dir ?? DOCS_IMG;
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${name}.png`);
  writeFileSync(path, png);
  return { png, ...size, path };
}
