import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/shared/logger.js';
import type { TestSchema } from './db.js';

// Driving the operator console over HTTP as a browser would (node's fetch, no browser):
// a cookie jar of one session, the CSRF token scraped from the last page, the Origin a
// browser sends; and the console's logs, captured.

/** A response, read whole. */
export interface Page {
  status: number;
  headers: Headers;
  body: string;
  url: string;
}

/** One browser session against a console whose start page is `base` (ending in /). */
export class ConsoleClient {
  cookie: string | undefined;
  /** Every page and response body this client saw, to search for secrets. */
  readonly seen: string[] = [];

  constructor(readonly base: string) {}

  get origin(): string {
    return new URL(this.base).origin;
  }

  /** A path below the console's start page ('outboxes/x/dead-letters'), or an absolute path. */
  url(path: string): string {
    return path.startsWith('/') ? `${this.origin}${path}` : `${this.base}${path}`;
  }

  private async read(response: Response): Promise<Page> {
    const body = await response.text();
    this.seen.push(body, [...response.headers].map(([k, v]) => `${k}: ${v}`).join('\n'));
    return { status: response.status, headers: response.headers, body, url: response.url };
  }

  /** GET without following redirects. */
  async get(path: string, headers: Record<string, string> = {}): Promise<Page> {
    const response = await fetch(this.url(path), { redirect: 'manual', headers: { ...(this.cookie ? { cookie: this.cookie } : {}), ...headers } });
    return this.read(response);
  }

  /** GET, following the console's 303s (as a browser does). */
  async follow(path: string): Promise<Page> {
    let page = await this.get(path);
    for (let i = 0; i < 5 && (page.status === 303 || page.status === 302); i++) page = await this.get(page.headers.get('location')!);
    return page;
  }

  /**
   * POST a form as a browser sends the console's forms: with the session's cookie,
   * `Origin: null` (the console's Referrer-Policy no-referrer makes Chromium send that)
   * and `Sec-Fetch-Site: same-origin`, and the CSRF token (scraped from a page of the
   * session) unless the form has one or `csrf: false`.
   */
  async post(path: string, form: Record<string, string | string[]> | URLSearchParams, options: { csrf?: string | false; headers?: Record<string, string> } = {}): Promise<Page> {
    const body = form instanceof URLSearchParams ? new URLSearchParams(form) : new URLSearchParams();
    if (!(form instanceof URLSearchParams)) for (const [k, v] of Object.entries(form)) for (const one of Array.isArray(v) ? v : [v]) body.append(k, one);
    if (options.csrf !== false && !body.has('_csrf')) body.set('_csrf', options.csrf ?? (await this.csrfToken()));
    const response = await fetch(this.url(path), {
      method: 'POST',
      redirect: 'manual',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        origin: 'null',
        'sec-fetch-site': 'same-origin',
        ...(this.cookie ? { cookie: this.cookie } : {}),
        ...options.headers,
      },
      body,
    });
    return this.read(response);
  }

  /** The CSRF token of this session, from a page (the start page carries it in the logout form). */
  async csrfToken(): Promise<string> {
    const page = await this.follow('');
    const m = /name="_csrf" value="([^"]+)"/.exec(page.body);
    if (!m) throw new Error(`no CSRF token on ${page.url} (${page.status})`);
    return m[1]!;
  }

  /** Log in through the form; throws unless it redirected. */
  async login(user: string, password: string): Promise<void> {
    const page = await this.post('login', { username: user, password, next: new URL(this.base).pathname }, { csrf: false });
    if (page.status !== 303) throw new Error(`login as ${user} answered ${page.status}: ${page.body.slice(0, 300)}`);
    this.cookie = page.headers.get('set-cookie')!.split(';')[0];
  }
}

/** A logger whose JSON lines are kept, to read audit lines and to search for secrets. */
export function capturedLogger(): { logger: Logger; lines: string[]; entries(): Array<Record<string, unknown>> } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return { logger: createLogger('debug', sink), lines, entries: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

/** Audit lines logged so far. */
export function auditLines(entries: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return entries.filter((e) => e.audit === true);
}

type Outbox = Pick<TestSchema, 'pool' | 'schema'>;

/**
 * A dead letter made the way the relay makes one: an id from the outbox's sequence, the
 * row whole in outbox_dead_letters, and for policy park the key parked behind it.
 */
export async function makeDeadLetter(
  db: Outbox,
  d: { topic?: string; key: string; policy?: 'park' | 'skip'; reason?: string; errorName?: string; payload?: unknown; payloadBytes?: Buffer; ago?: string },
): Promise<{ id: number; messageId: string }> {
  const s = `"${db.schema}"`;
  const { rows } = await db.pool.query<{ id: number; message_id: string }>(
    `INSERT INTO ${s}.outbox_dead_letters
       (id, message_id, topic, key, payload, payload_bytes, headers, created_at, attempts, reason, error_name, policy, first_failed_at, dead_lettered_at)
     VALUES (nextval('${s}.outbox_id_seq'), gen_random_uuid(), $1, $2, $3, $4, '{"traceparent":"00-abc-def-01"}',
             now() - $7::interval - interval '1 minute', 3, $5, $6, $8, now() - $7::interval, now() - $7::interval)
     RETURNING id, message_id`,
    [
      d.topic ?? 'orders',
      d.key,
      d.payloadBytes ? null : JSON.stringify(d.payload ?? { key: d.key }),
      d.payloadBytes ?? null,
      d.reason ?? 'message of 5000 bytes exceeds max.message.bytes 2000',
      d.errorName ?? 'MESSAGE_TOO_LARGE',
      d.ago ?? '0 seconds',
      d.policy ?? 'park',
    ],
  );
  const id = Number(rows[0]!.id);
  if ((d.policy ?? 'park') === 'park') {
    await db.pool.query(`INSERT INTO ${s}.outbox_parked_keys (topic, key, dead_letter_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [d.topic ?? 'orders', d.key, id]);
  }
  return { id, messageId: rows[0]!.message_id };
}

/** Every href, src and form action of a page. */
export function linksOf(body: string): string[] {
  return [...body.matchAll(/\s(?:href|src|action|formaction)="([^"]*)"/g)].map((m) => m[1]!.replaceAll('&amp;', '&'));
}
