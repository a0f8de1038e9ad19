/**
 * The console bench's browser: one logged-in session over HTTP (node's fetch, the session
 * cookie kept), each GET timed from the request to the last byte of the page, and the few
 * readings of a page's HTML the bench checks its answers with (heading, rows of a table,
 * the count line, the "Next page" link). The readings follow the console's markup
 * (src/console/web/); a page they cannot read fails the check, it is never skipped.
 */

/** A page as the browser got it, with the milliseconds it took. */
export interface TimedPage {
  url: string;
  status: number;
  contentType: string;
  body: string;
  ms: number;
}

export class ConsoleBrowser {
  private cookie: string | undefined;

  /** `base`: the console's start page (`http://127.0.0.1:port/`). */
  constructor(readonly base: string) {}

  /** A path of the console (`/outboxes/…`, or a link's href) as a whole URL. */
  url(pathOrHref: string): string {
    return new URL(pathOrHref, this.base).toString();
  }

  /** Log in through the form, as a browser posts it; keeps the session cookie. */
  async login(username: string, password: string): Promise<void> {
    const response = await fetch(this.url('/login'), {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'null', 'sec-fetch-site': 'same-origin' },
      body: new URLSearchParams({ username, password, next: '/' }),
    });
    await response.arrayBuffer();
    const cookie = response.headers.get('set-cookie')?.split(';')[0];
    if (response.status !== 303 || !cookie) throw new Error(`console bench: login as ${username} answered ${response.status}${cookie ? '' : ' without a session cookie'}`);
    this.cookie = cookie;
  }

  /** GET a page with the session, not following redirects (a redirect is an answer to check). */
  async get(pathOrHref: string): Promise<TimedPage> {
    const url = this.url(pathOrHref);
    const started = performance.now();
    const response = await fetch(url, { redirect: 'manual', headers: this.cookie ? { cookie: this.cookie } : {} });
    const body = await response.text();
    const ms = performance.now() - started;
    return { url, status: response.status, contentType: response.headers.get('content-type') ?? '', body, ms };
  }
}

const ENTITIES: Record<string, string> = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'", '&#96;': '`' };

/** HTML text or attribute value back to the text (the console escapes only these). */
export function unescapeHtml(text: string): string {
  return text.replace(/&(amp|lt|gt|quot|#39|#96);/g, (e) => ENTITIES[e]!);
}

/** The page's <h1>, as text. */
export function heading(body: string): string | undefined {
  const m = /<h1>([^<]*)<\/h1>/.exec(body);
  return m ? unescapeHtml(m[1]!) : undefined;
}

/** Whether the page is one of the logged-in user's (not the login form). */
export function signedInAs(body: string, user: string): boolean {
  return body.includes(`Signed in as <strong>${user}</strong>`);
}

/** The href of the page's `rel="next"` link, unescaped, or null. */
export function nextLink(body: string): string | null {
  const m = /<a href="([^"]+)" rel="next">/.exec(body);
  return m ? unescapeHtml(m[1]!) : null;
}

/** The href of the first link whose text starts with `text`, or null. */
export function linkStartingWith(body: string, text: string): string | null {
  const m = new RegExp(`<a [^>]*href="([^"]+)"[^>]*>${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`).exec(body);
  return m ? unescapeHtml(m[1]!) : null;
}

/** The count that opens the page's status line (`10,000+ dead letters match …`, `about 1,000,000 …`, `Dry run: 12 …`). */
export function statusCount(body: string): string | undefined {
  const m = /<p role="status">(?:<strong>Dry run:<\/strong> )?((?:about )?[\d,]+\+?) /.exec(body);
  return m?.[1];
}

/** A card of the overview (`Backlog (unsent rows)`), as text without its markup. */
export function card(body: string, label: string): string | undefined {
  const m = new RegExp(`<dt>${label.replace(/[()]/g, '\\$&')}</dt><dd>(.*?)</dd>`).exec(body);
  return m ? unescapeHtml(m[1]!.replace(/<[^>]+>/g, '')) : undefined;
}

/** The body rows of the page's tables (each `<tr>` inside a `<tbody>`), as their HTML. */
export function tableRows(body: string): string[] {
  const rows: string[] = [];
  for (const tbody of body.matchAll(/<tbody>([\s\S]*?)<\/tbody>/g)) rows.push(...[...tbody[1]!.matchAll(/<tr>([\s\S]*?)<\/tr>/g)].map((m) => m[1]!));
  return rows;
}

/** The dead letters a list or a confirmation page shows: their ids, in order (from their links). */
export function deadLetterIds(body: string): number[] {
  return tableRows(body).flatMap((row) => {
    const m = /<a href="[^"]*\/dead-letters\/(\d+)"/.exec(row);
    return m ? [Number(m[1])] : [];
  });
}

/** The parked keys a parked-keys page shows: topic and key of each row, in order. */
export function parkedKeyRows(body: string): Array<{ topic: string; key: string }> {
  return tableRows(body).flatMap((row) => {
    const m = /<td class="text">([^<]*)<\/td>\s*<td class="text"><code>([^<]*)<\/code><\/td>/.exec(row);
    return m ? [{ topic: unescapeHtml(m[1]!), key: unescapeHtml(m[2]!) }] : [];
  });
}

/** The value of a `<dt>label</dt><dd>…</dd>` field of a detail page, as text without markup. */
export function field(body: string, label: string): string | undefined {
  const m = new RegExp(`<dt>${label}</dt><dd>([\\s\\S]*?)</dd>`).exec(body);
  return m ? unescapeHtml(m[1]!.replace(/<[^>]+>/g, '')) : undefined;
}
