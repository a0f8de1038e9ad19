import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { describeError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { ASSETS } from './assets.js';
import { login, logout, sessionOf, showLogin } from './auth.js';
import { httpErrorOf, pageContext, type ConsoleEnv, type ConsoleOutbox, type ConsoleRequest } from './context.js';
import type { ConsoleData } from './consoleData.js';
import { HttpError, redirect, sendJson, sendPage, sendText } from './http.js';
import { JobRegistry } from './jobs.js';
import { outboxPath } from './layout.js';
import { errorPage } from './miscPages.js';
import { setSecurityHeaders } from './security.js';
import { LoginThrottle, SessionStore } from './sessions.js';
import type { ConsoleUser } from './users.js';
import * as read from './readRoutes.js';
import * as act from './actionRoutes.js';
import { listenOn } from '../../shared/listen.js';

// The console's HTTP server (node:http, no framework): security headers on everything,
// the path prefix, static assets, login, then the outbox pages. Every page is rendered on
// the server; a POST changes something and answers with a redirect (or an error page).

/** What {@link startConsoleServer} needs: checked options and open pools. */
export interface ConsoleServerOptions {
  host: string;
  port: number;
  prefix: string;
  publicOrigin: string;
  outboxes: readonly ConsoleOutbox[];
  users: readonly ConsoleUser[];
  data: ConsoleData;
  defaultRate: number;
  logger: Logger;
}

/** A listening console server. */
export interface ConsoleServer {
  readonly host: string;
  readonly port: number;
  /** http://host:port plus the prefix and a final slash: the start page. */
  readonly url: string;
  readonly jobs: JobRegistry;
  /** Stop listening, abort running replays (bounded by `jobTimeoutMs`); pools are the caller's. Idempotent. */
  close(jobTimeoutMs?: number): Promise<void>;
}

const JSON_PATH = /\.json$/;

function remoteAddressOf(req: IncomingMessage): string {
  const own = req.socket.remoteAddress ?? 'unknown';
  const forwarded = req.headers['x-forwarded-for'];
  const via = (Array.isArray(forwarded) ? forwarded.join(',') : forwarded)?.slice(0, 200);
  return via ? `${own} (for ${via})` : own;
}

function serveAsset(res: ServerResponse, name: string, head: boolean): void {
  const asset = ASSETS.get(name);
  if (!asset) return sendText(res, 404, 'not found\n', head);
  res.writeHead(200, { 'content-type': asset.type, 'cache-control': 'public, max-age=31536000, immutable', 'content-length': asset.body.length });
  res.end(head ? undefined : asset.body);
}

/** Route a request below /outboxes/<name>/. */
async function outboxRoute(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox, rest: string[]): Promise<void> {
  const get = r.method !== 'POST';
  const [first, second, third] = rest;
  if (rest.length === 1 && first === '' && get) return read.overview(env, r, o);
  if (first === 'dead-letters') {
    if (rest.length === 1 && get) return read.deadLetters(env, r, o);
    if (rest.length === 2 && (second === 'replay' || second === 'discard')) {
      if (get) return act.confirmAction(env, r, o, second);
      return second === 'replay' ? act.startReplay(env, r, o) : act.discard(env, r, o);
    }
    if (rest.length === 2 && /^[1-9]\d{0,15}$/.test(second!) && get) return read.deadLetter(env, r, o, Number(second));
  }
  if (first === 'parked-keys') {
    if (rest.length === 1 && get) return read.parkedKeys(env, r, o);
    if (rest.length === 2 && second === 'unpark') return get ? act.confirmUnpark(env, r, o) : act.unpark(env, r, o);
  }
  if (first === 'jobs') {
    if (rest.length === 1 && get) return read.jobs(env, r, o);
    if (rest.length === 2 && get && second) return read.job(env, r, o, second);
    if (rest.length === 3 && third === 'cancel' && !get && second) return act.cancelJob(env, r, o, second);
  }
  throw new HttpError(r.method === 'POST' ? 405 : 404, r.method === 'POST' ? 'This page takes no form.' : 'There is no such page.', r.method === 'POST' ? 'Method not allowed' : 'Not found');
}

async function route(env: ConsoleEnv, r: ConsoleRequest): Promise<void> {
  const { path, method, res } = r;
  const head = method === 'HEAD';
  if (path.startsWith('/static/')) return method === 'POST' ? sendText(res, 405, 'method not allowed\n') : serveAsset(res, path.slice('/static/'.length), head);
  if (path === '/healthz') return sendText(res, 200, 'ok\n', head);
  if (path === '/login') return method === 'POST' ? login(env, r) : showLogin(env, r);
  const session = r.session;
  if (!session) {
    if (method !== 'POST' && !JSON_PATH.test(path)) {
      const next = `${env.prefix}${path}${r.query.size ? `?${r.query.toString()}` : ''}`;
      return redirect(res, `${env.prefix}/login?${new URLSearchParams([['next', next]]).toString()}`);
    }
    if (JSON_PATH.test(path)) return sendJson(res, 401, { error: 'log in first' }, head);
    throw new HttpError(401, 'Log in first: your session has ended or you never logged in. Nothing was changed.', 'Not logged in');
  }
  if (path === '/logout') {
    if (method !== 'POST') throw new HttpError(405, 'Log out with the button.', 'Method not allowed');
    return logout(env, r, session);
  }
  if (path === '/') {
    if (method === 'POST') throw new HttpError(405, 'This page takes no form.', 'Method not allowed');
    if (env.outboxes.size === 1) return redirect(res, outboxPath(env.prefix, [...env.outboxes.keys()][0]!));
    return read.landing(env, r);
  }
  const parts = path.split('/');
  // ['', 'outboxes', name, ...rest]
  if (parts[1] === 'outboxes' && parts[2]) {
    const o = env.outboxes.get(parts[2]);
    if (!o) throw new HttpError(404, 'There is no outbox of that name in this console.', 'Not found');
    if (parts.length === 3) return redirect(res, outboxPath(env.prefix, o.name));
    return outboxRoute(env, r, o, parts.slice(3));
  }
  throw new HttpError(404, 'There is no such page.', 'Not found');
}

/** Start the console's HTTP server; resolves once it listens. */
export async function startConsoleServer(options: ConsoleServerOptions): Promise<ConsoleServer> {
  const logger = options.logger;
  const env: ConsoleEnv = {
    prefix: options.prefix,
    publicOrigin: options.publicOrigin,
    outboxes: new Map(options.outboxes.map((o) => [o.name, o])),
    users: new Map(options.users.map((u) => [u.name, u])),
    data: options.data,
    jobs: new JobRegistry(),
    sessions: new SessionStore(),
    throttle: new LoginThrottle(),
    logger,
    defaultRate: options.defaultRate,
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    setSecurityHeaders(res);
    const method = req.method === 'GET' || req.method === 'HEAD' || req.method === 'POST' ? req.method : undefined;
    if (!method) {
      res.setHeader('allow', 'GET, HEAD, POST');
      return sendText(res, 405, 'method not allowed\n');
    }
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://console.invalid');
    } catch {
      return sendText(res, 400, 'bad request\n');
    }
    let path = url.pathname;
    if (env.prefix) {
      if (path === env.prefix) return redirect(res, `${env.prefix}/`);
      if (!path.startsWith(`${env.prefix}/`)) return sendText(res, 404, `not found: the console is at ${env.prefix}/\n`, method === 'HEAD');
      path = path.slice(env.prefix.length);
    }
    const r: ConsoleRequest = { req, res, method, path, query: url.searchParams, session: sessionOf(env, req), remoteAddress: remoteAddressOf(req) };
    try {
      await route(env, r);
    } catch (error) {
      const outbox = path.split('/')[1] === 'outboxes' ? path.split('/')[2] : undefined;
      const known = outbox !== undefined && env.outboxes.has(outbox) ? outbox : undefined;
      const e = httpErrorOf(error, known);
      if (e.status >= 500) logger.error({ err: describeError(error), outbox: known, path }, 'console: request failed');
      if (res.headersSent) return void res.destroy();
      if (JSON_PATH.test(path)) return sendJson(res, e.status, { error: e.message });
      const title = e.title ?? (e.status === 404 ? 'Not found' : e.status === 403 ? 'Forbidden' : e.status === 400 ? 'Not accepted' : 'Error');
      sendPage(res, e.status, errorPage(pageContext(env, r, known), e.status, title, e.message), method === 'HEAD');
    }
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      logger.error({ err: describeError(error) }, 'console: request failed');
      if (!res.headersSent) sendText(res, 500, 'internal error\n');
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 5_000;
  server.headersTimeout = 20_000;
  server.requestTimeout = 60_000;
  const { host, port, origin } = await listenOn(server, options.port, options.host);
  const url = `${origin}${env.prefix}/`;
  let closing: Promise<void> | undefined;
  return {
    host,
    port,
    url,
    jobs: env.jobs,
    close(jobTimeoutMs = 5_000) {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await env.jobs.stopAll(jobTimeoutMs);
        server.closeAllConnections();
        await stopped;
        env.sessions.clear();
      })();
      return closing;
    },
  };
}
