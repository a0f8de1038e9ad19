import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Html } from './html.js';

// Small pieces of HTTP the console's server needs: a typed error that becomes an error
// page, form bodies, cookies, and responses that are never cached.

/** An error the server turns into a page with this status; `message` is shown as it is. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** A title for the page (defaults by status). */
    readonly title?: string,
  ) {
    super(message);
  }
}

/** Largest form body taken: a page of selected ids and a filter fit easily. */
const MAX_FORM_BYTES = 64 * 1024;

/** The urlencoded body of a POST. */
export async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') throw new HttpError(415, 'Send the form as application/x-www-form-urlencoded.');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_FORM_BYTES) throw new HttpError(413, 'The form is too large.');
    chunks.push(chunk as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

/** Cookies of a request by name (the first of each name). */
export function cookiesOf(req: IncomingMessage): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    if (!out.has(name)) out.set(name, part.slice(eq + 1).trim());
  }
  return out;
}

/** An HTML page; never cached (it may show what only a logged-in user may see). */
export function sendPage(res: ServerResponse, status: number, page: Html, head = false): void {
  const body = Buffer.from(page.text, 'utf8');
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'content-length': body.length });
  res.end(head ? undefined : body);
}

/** A JSON document; never cached. */
export function sendJson(res: ServerResponse, status: number, value: unknown, head = false): void {
  const body = Buffer.from(`${JSON.stringify(value)}\n`, 'utf8');
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', 'content-length': body.length });
  res.end(head ? undefined : body);
}

/** Plain text; never cached. */
export function sendText(res: ServerResponse, status: number, text: string, head = false): void {
  const body = Buffer.from(text, 'utf8');
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', 'content-length': body.length });
  res.end(head ? undefined : body);
}

/** A path a Location header may carry: one leading slash (`//x` and `/\\x` name another host), no control character. */
export function isLocalPath(location: string): boolean {
  return location.startsWith('/') && location[1] !== '/' && location[1] !== '\\' && !/[\u0000-\u001f\u007f]/.test(location);
}

/**
 * 303 See Other: after a POST, the browser GETs `location` (a path of this console).
 * Anything else (`//host`, `/\\host`, a full URL) is refused: no redirect of the console
 * may lead off the site, whatever a caller passes.
 */
export function redirect(res: ServerResponse, location: string): void {
  if (!isLocalPath(location)) {
    throw new HttpError(500, 'Refused to redirect off the console.');
  }
  res.writeHead(303, { location, 'cache-control': 'no-store', 'content-length': 0 });
  res.end();
}
