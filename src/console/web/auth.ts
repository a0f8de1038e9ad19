import type { IncomingMessage, ServerResponse } from 'node:http';
import { audit } from './audit.js';
import type { ConsoleEnv, ConsoleRequest } from './context.js';
import { cookiesOf, HttpError, isLocalPath, readForm, redirect, sendPage } from './http.js';
import { loginPage } from './miscPages.js';
import { verifyPassword } from './passwords.js';
import { crossOriginProblem } from './security.js';
import { csrfMatches, type Session } from './sessions.js';

// Logging in and out, and finding the session of a request. The session cookie holds a
// random id only; it is HttpOnly, SameSite=Strict, scoped to the console's path, and
// Secure when the console is reached over https (--public-origin https://…, or a proxy's
// X-Forwarded-Proto: https).

const COOKIE = 'outbox_console';
const SECURE_COOKIE = `__Secure-${COOKIE}`;

function isSecure(env: ConsoleEnv, req: IncomingMessage): boolean {
  if (env.publicOrigin.startsWith('https:')) return true;
  const proto = req.headers['x-forwarded-proto'];
  return (Array.isArray(proto) ? proto[0] : proto)?.split(',')[0]?.trim().toLowerCase() === 'https';
}

function setCookie(env: ConsoleEnv, req: IncomingMessage, res: ServerResponse, value: string, maxAge?: number): void {
  const secure = isSecure(env, req);
  const attributes = [`Path=${env.prefix || '/'}`, 'HttpOnly', 'SameSite=Strict', ...(secure ? ['Secure'] : []), ...(maxAge !== undefined ? [`Max-Age=${maxAge}`] : [])];
  res.setHeader('set-cookie', `${secure ? SECURE_COOKIE : COOKIE}=${value}; ${attributes.join('; ')}`);
}

/** The live session of a request's cookie, if any. */
export function sessionOf(env: ConsoleEnv, req: IncomingMessage): Session | undefined {
  const cookies = cookiesOf(req);
  return env.sessions.find(cookies.get(SECURE_COOKIE) ?? cookies.get(COOKIE));
}

/**
 * Where a login may send the browser on: a path of this console, never another site.
 * `next` is resolved as the browser would resolve it (dot segments, `//host`) and only
 * the result is used, rebuilt from its path and query: `/..//evil.example` resolves to
 * the path `//evil.example`, which a browser reads as another host, so it goes home.
 */
export function safeNext(env: ConsoleEnv, next: string | null): string {
  const home = `${env.prefix}/`;
  if (!next || next.length > 2_000 || !next.startsWith('/') || /[\\\u0000-\u001f\u007f]/.test(next)) return home;
  const base = 'http://console.invalid';
  let url: URL;
  try {
    url = new URL(next, base);
  } catch {
    return home;
  }
  const path = url.pathname;
  if (url.origin !== base || !isLocalPath(path) || !path.startsWith(home) || path.startsWith(`${env.prefix}/login`)) return home;
  return path + url.search;
}

/** GET /login: the form. */
export function showLogin(env: ConsoleEnv, r: ConsoleRequest): void {
  if (r.session) return redirect(r.res, safeNext(env, r.query.get('next')));
  sendPage(r.res, 200, loginPage({ prefix: env.prefix, session: undefined, outboxCount: env.outboxes.size }, safeNext(env, r.query.get('next'))), r.method === 'HEAD');
}

/** POST /login: check the password (constant time, throttled), start a session. */
export async function login(env: ConsoleEnv, r: ConsoleRequest): Promise<void> {
  // A login form posted from another site would log the victim in as the attacker.
  const foreign = crossOriginProblem(r.req, env.publicOrigin);
  if (foreign) throw new HttpError(403, `Refused: ${foreign}.`, 'Forbidden');
  const form = await readForm(r.req);
  const name = (form.get('username') ?? '').trim().slice(0, 200);
  const password = form.get('password') ?? '';
  const next = safeNext(env, form.get('next'));
  const ctx = { prefix: env.prefix, session: undefined, outboxCount: env.outboxes.size };
  const user = env.users.get(name);
  // A name that is no user is logged as such: people type their password into the name field.
  const who = user ? user.name : '(unknown user)';
  // The TCP peer, not X-Forwarded-For: a header is the client's own word.
  const address = r.req.socket.remoteAddress ?? 'unknown';
  const wait = env.throttle.waitMs(name, address);
  if (wait > 0) {
    const byAddress = env.throttle.addressLimited(address);
    audit(env.logger, { user: who, role: user?.role ?? '', action: 'login', outcome: 'refused', detail: byAddress ? 'too many failed logins from this address' : 'too many failed logins', remoteAddress: r.remoteAddress });
    r.res.setHeader('retry-after', String(Math.ceil(wait / 1000)));
    sendPage(r.res, 429, loginPage(ctx, next, `Too many failed logins ${byAddress ? 'from this address' : 'for this name'}: try again in ${Math.ceil(wait / 1000)} s.`, name));
    return;
  }
  const ok = password.length > 0 && password.length <= 1_024 && (await verifyPassword(password, user?.password));
  if (!ok || !user) {
    env.throttle.failed(name, address);
    audit(env.logger, { user: who, role: user?.role ?? '', action: 'login', outcome: 'refused', detail: 'wrong user name or password', remoteAddress: r.remoteAddress });
    sendPage(r.res, 401, loginPage(ctx, next, 'Wrong user name or password.', name));
    return;
  }
  env.throttle.succeeded(name);
  if (r.session) env.sessions.end(r.session);
  const session = env.sessions.create(user.name, user.role);
  setCookie(env, r.req, r.res, session.id);
  audit(env.logger, { user: user.name, role: user.role, action: 'login', outcome: 'ok', remoteAddress: r.remoteAddress });
  redirect(r.res, next);
}

/** POST /logout: end the session (CSRF-checked like every POST: a page elsewhere must not log people out). */
export async function logout(env: ConsoleEnv, r: ConsoleRequest, session: Session): Promise<void> {
  try {
    await checkedForm(env, r, session);
  } catch (error) {
    audit(env.logger, { user: session.user, role: session.role, action: 'logout', outcome: 'refused', detail: error instanceof Error ? error.message : String(error), remoteAddress: r.remoteAddress });
    throw error;
  }
  env.sessions.end(session);
  setCookie(env, r.req, r.res, '', 0);
  audit(env.logger, { user: session.user, role: session.role, action: 'logout', outcome: 'ok', remoteAddress: r.remoteAddress });
  redirect(r.res, `${env.prefix}/login`);
}

/**
 * The checks of every POST but the login: from the console's own pages (Origin,
 * Sec-Fetch-Site) and with the session's CSRF token. Returns the form.
 *
 * @throws HttpError 403
 */
export async function checkedForm(env: ConsoleEnv, r: ConsoleRequest, session: Session): Promise<URLSearchParams> {
  const foreign = crossOriginProblem(r.req, env.publicOrigin);
  if (foreign) throw new HttpError(403, `Refused: ${foreign}. Nothing was changed.`, 'Forbidden');
  const form = await readForm(r.req);
  if (!csrfMatches(session, form.get('_csrf') ?? undefined)) {
    throw new HttpError(403, 'Refused: the form is missing its security token or it is stale (the session changed). Reload the page and try again. Nothing was changed.', 'Forbidden');
  }
  return form;
}
