import assert from 'node:assert/strict';
import type { Page } from 'playwright-core';

// The operator console in a real browser (test/helpers/browser.ts): logging in through the
// form, reading what the page shows, moving with the keyboard only, and keeping the HTML of
// every page the browser was served, to search it for secrets. Page code is passed as
// strings: the tests compile without the DOM's types.

/** Every HTML document and script-fetched body the browser received, with its URL and status. */
export interface ServedPages {
  readonly pages: Array<{ url: string; status: number; body: string }>;
  /** Wait for the bodies still being read. */
  settled(): Promise<void>;
}

/** Keep the body of every document (and fetch) response `page` gets from now on. */
export function recordServedPages(page: Page): ServedPages {
  const pages: ServedPages['pages'] = [];
  const reading: Array<Promise<void>> = [];
  page.on('response', (response) => {
    const type = response.request().resourceType();
    if (type !== 'document' && type !== 'fetch') return;
    if (response.status() >= 300 && response.status() < 400) return; // a redirect has no body to read
    reading.push(
      response.text().then(
        (body) => void pages.push({ url: response.url(), status: response.status(), body }),
        () => undefined, // the page navigated away before the body was read
      ),
    );
  });
  return { pages, settled: async () => void (await Promise.all(reading)) };
}

/**
 * Log in through the login form the browser is on; waits for the page the console sends
 * next (with `refused`, for the login form's answer to come back).
 */
export async function logInWithForm(page: Page, user: string, password: string, { refused = false } = {}): Promise<void> {
  await page.getByLabel('User name').fill(user);
  await page.getByLabel('Password').fill(password);
  const answered = refused
    ? page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname.endsWith('/login'))
    : page.waitForURL((url) => !url.pathname.endsWith('/login'));
  await Promise.all([answered, page.getByRole('button', { name: 'Log in' }).click()]);
}

/** Log out with the header's button; waits for the login page. */
export async function logOut(page: Page): Promise<void> {
  await Promise.all([page.waitForURL((url) => url.pathname.endsWith('/login')), page.getByRole('button', { name: 'Log out' }).click()]);
}

/** The text of the overview's card `label` (its <dd>). */
export async function cardValue(page: Page, label: string): Promise<string> {
  const dd = page.locator('dl.cards > div').filter({ has: page.locator('dt', { hasText: label }) }).locator('dd');
  return (await dd.innerText()).trim();
}

/** The CSRF token the page carries (in its logout form). */
export async function csrfTokenOf(page: Page): Promise<string> {
  const token = await page.locator('input[name="_csrf"]').first().getAttribute('value');
  assert.ok(token, `no CSRF token on ${page.url()}`);
  return token;
}

/** A form POSTed from the page itself (fetch: the browser's cookie, Origin and Sec-Fetch-Site). */
export async function postFromPage(page: Page, path: string, form: Record<string, string>): Promise<{ status: number; url: string; body: string }> {
  return page.evaluate<{ status: number; url: string; body: string }>(
    `(async () => {
      const r = await fetch(${JSON.stringify(path)}, { method: 'POST', credentials: 'same-origin', body: new URLSearchParams(${JSON.stringify(form)}) });
      return { status: r.status, url: r.url, body: await r.text() };
    })()`,
  );
}

/** What has the focus: tag, id, accessible-ish name, and how its focus ring is drawn. */
export interface Focused {
  tag: string;
  id: string;
  name: string;
  href: string;
  outlineStyle: string;
  outlineWidth: number;
  focusVisible: boolean;
  inViewport: boolean;
}

/** The focused element, described. */
export function focused(page: Page): Promise<Focused> {
  return page.evaluate<Focused>(`(() => {
    const e = document.activeElement;
    if (!e || e === document.body) return { tag: 'body', id: '', name: '', href: '', outlineStyle: 'none', outlineWidth: 0, focusVisible: false, inViewport: true };
    const s = getComputedStyle(e);
    const r = e.getBoundingClientRect();
    const labelled = e.id ? document.querySelector('label[for="' + e.id + '"]') : null;
    const name = (e.getAttribute('aria-label') || (labelled && labelled.textContent) || e.textContent || e.getAttribute('value') || '').replace(/\\s+/g, ' ').trim();
    return {
      tag: e.tagName.toLowerCase(),
      id: e.id,
      name,
      href: e.getAttribute('href') || '',
      outlineStyle: s.outlineStyle,
      outlineWidth: parseFloat(s.outlineWidth) || 0,
      focusVisible: e.matches(':focus-visible'),
      inViewport: r.right > 0 && r.bottom > 0 && r.left < innerWidth && r.top < innerHeight && r.width > 0 && r.height > 0,
    };
  })()`);
}

/**
 * Press Tab (Shift+Tab with `backwards`) until the focused element satisfies `wanted`, at
 * most `maxPresses` times. At every stop the focus must be visible: a focus ring drawn
 * (:focus-visible, an outline that is not none) on an element on screen.
 */
export async function tabTo(page: Page, what: string, wanted: (f: Focused) => boolean, { backwards = false, maxPresses = 60 } = {}): Promise<Focused> {
  const path: string[] = [];
  for (let i = 0; i < maxPresses; i++) {
    await page.keyboard.press(backwards ? 'Shift+Tab' : 'Tab');
    const f = await focused(page);
    path.push(`${f.tag}${f.id ? `#${f.id}` : ''} "${f.name.slice(0, 40)}"`);
    if (f.tag !== 'body') {
      assert.ok(f.focusVisible && f.outlineStyle !== 'none' && f.outlineWidth >= 2, `focus ring of ${path.at(-1)} on ${page.url()}: ${JSON.stringify(f)}`);
      assert.ok(f.inViewport, `the focused ${path.at(-1)} is on screen (${page.url()})`);
    }
    if (wanted(f)) return f;
  }
  throw new Error(`${what}: not reached in ${maxPresses} presses of ${backwards ? 'Shift+Tab' : 'Tab'} on ${page.url()}; went through ${path.join(' → ')}`);
}

/** The page does not scroll sideways: its content fits the viewport's width. */
export async function assertNoHorizontalScroll(page: Page, what: string): Promise<void> {
  const { scrollWidth, innerWidth } = await page.evaluate<{ scrollWidth: number; innerWidth: number }>(
    '({ scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth })',
  );
  assert.ok(scrollWidth <= innerWidth, `${what}: the page is ${scrollWidth} px wide in a viewport of ${innerWidth} px`);
}

/**
 * Text on the page whose colour has less than `minimum`:1 contrast (WCAG 2 relative
 * luminance) with the background it is drawn on: the first opaque background among the
 * element and its ancestors. Each entry names the element, its text and the ratio.
 */
export async function lowContrastText(page: Page, minimum = 4.5): Promise<string[]> {
  // A string, run in the page: this project's TypeScript has no DOM types.
  return page.evaluate<string[]>(`(() => {
    const min = ${minimum};
    const rgb = (css) => {
      const m = /rgba?\\(([\\d.]+),\\s*([\\d.]+),\\s*([\\d.]+)(?:,\\s*([\\d.]+))?\\)/.exec(css);
      return m ? [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 1 : Number(m[4])] : [0, 0, 0, 0];
    };
    const luminance = ([r, g, b]) => {
      const [R, G, B] = [r, g, b].map((c) => {
        const s = c / 255;
        return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * R + 0.7152 * G + 0.0722 * B;
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = rgb(getComputedStyle(e).backgroundColor);
        if (c[3] > 0.5) return c;
      }
      return [255, 255, 255, 1];
    };
    const problems = [];
    for (const el of document.body.querySelectorAll('*')) {
      const text = Array.from(el.childNodes).filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent || '').join('').trim();
      if (!text || el.getClientRects().length === 0) continue;
      const style = getComputedStyle(el);
      if (style.visibility === 'hidden' || style.clip === 'rect(0px, 0px, 0px, 0px)') continue;
      const fg = luminance(rgb(style.color));
      const bg = luminance(background(el));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      if (ratio < min) problems.push(el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).replace(/ /g, '.') : '') + ' "' + text.slice(0, 40) + '": ' + ratio.toFixed(2) + ':1');
    }
    return problems;
  })()`);
}
