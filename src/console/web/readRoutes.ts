import { html } from './html.js';
import { HttpError, sendJson, sendPage } from './http.js';
import { pageContext, type ConsoleEnv, type ConsoleOutbox, type ConsoleRequest } from './context.js';
import { overviewPage } from './overviewPage.js';
import { DEAD_LETTER_PAGE_SIZE, deadLettersPage, filterForm } from './deadLettersPage.js';
import { deadLetterPage } from './deadLetterPage.js';
import { cursorFrom, PARKED_KEY_PAGE_SIZE, parkedKeysPage } from './parkedKeysPage.js';
import { jobPage, jobsPage } from './jobPages.js';
import { landingPage, type OutboxSummary } from './miscPages.js';
import { filterFrom } from './filters.js';
import { layout, notice, outboxPath } from './layout.js';
import { progressOf } from './jobs.js';
import type { Notice, Session } from './sessions.js';

// The pages that only read: the landing page, an outbox's overview, its dead letters (list
// and detail), its parked keys and its replay jobs. Viewers and operators see the same;
// an operator's pages also carry the action links.

/** The notice a redirect left for this session, once. */
export function takeFlash(session: Session | undefined): Notice[] {
  const f = session?.flash;
  if (!f || !session) return [];
  delete session.flash;
  return [f];
}

/** How long the landing page waits for one outbox's overview. */
const LANDING_TIMEOUT_MS = 5_000;

/** GET / : the outboxes (or, with one, straight to it). */
export async function landing(env: ConsoleEnv, r: ConsoleRequest): Promise<void> {
  const summaries = await Promise.all(
    [...env.outboxes.values()].map(async (o): Promise<OutboxSummary> => {
      let timer: NodeJS.Timeout | undefined;
      try {
        const overview = await Promise.race([
          env.data.readOverview(o.pool, { name: o.name, schema: o.schema }),
          new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('timed out')), LANDING_TIMEOUT_MS))),
        ]);
        return { name: o.name, overview };
      } catch (error) {
        env.logger.warn({ outbox: o.name, err: error instanceof Error ? error.message : String(error) }, 'console: cannot read an outbox for the start page');
        return { name: o.name, problem: 'cannot be read now (see the console log)' };
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  sendPage(r.res, 200, landingPage(pageContext(env, r), summaries, takeFlash(r.session)), r.method === 'HEAD');
}

/** GET /outboxes/<name>/ */
export async function overview(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  const view = await env.data.readOverview(o.pool, { name: o.name, schema: o.schema });
  sendPage(r.res, 200, overviewPage(pageContext(env, r), view, takeFlash(r.session)), r.method === 'HEAD');
}

/** GET /outboxes/<name>/dead-letters?filter…&after=id */
export async function deadLetters(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  let filter;
  try {
    filter = filterFrom(r.query);
  } catch (error) {
    if (!(error instanceof HttpError)) throw error;
    // Show the form again as it was typed, with what is wrong.
    const raw = Object.fromEntries([...r.query].filter(([k]) => k !== 'after'));
    const body = html`${notice({ kind: 'error', text: error.message })}${filterForm(outboxPath(env.prefix, o.name, 'dead-letters'), raw)}`;
    sendPage(r.res, 400, layout({ ...pageContext(env, r, o.name), section: 'dead-letters' }, 'Dead letters', body), r.method === 'HEAD');
    return;
  }
  const afterText = r.query.get('after');
  const after = afterText === null || afterText === '' ? null : Number(afterText);
  if (after !== null && !(Number.isSafeInteger(after) && after >= 0)) throw new HttpError(400, 'The page link is malformed: start again from the first page.');
  const page = await env.data.searchDeadLetters(o.pool, o.schema, filter, { afterId: after, limit: DEAD_LETTER_PAGE_SIZE });
  sendPage(r.res, 200, deadLettersPage(pageContext(env, r), o.name, filter, after, page, takeFlash(r.session)), r.method === 'HEAD');
}

/** GET /outboxes/<name>/dead-letters/<id> */
export async function deadLetter(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox, id: number): Promise<void> {
  const d = await env.data.readDeadLetter(o.pool, o.schema, id);
  if (!d) throw new HttpError(404, `There is no dead letter ${id} in outbox ${o.name} (replayed or discarded, or never was).`, 'Not found');
  sendPage(r.res, 200, deadLetterPage(pageContext(env, r), o.name, d, takeFlash(r.session)), r.method === 'HEAD');
}

/** GET /outboxes/<name>/parked-keys?after=<dead letter id> */
export async function parkedKeys(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  const after = await cursorFrom(r.query, (id) => env.data.parkedKeyOf(o.pool, o.schema, id));
  const page = await env.data.listParkedKeys(o.pool, o.schema, { after, limit: PARKED_KEY_PAGE_SIZE });
  sendPage(r.res, 200, parkedKeysPage(pageContext(env, r), o.name, after, page, Date.now(), takeFlash(r.session)), r.method === 'HEAD');
}

/** GET /outboxes/<name>/jobs */
export function jobs(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): void {
  sendPage(r.res, 200, jobsPage(pageContext(env, r), o.name, env.jobs.list(o.name), takeFlash(r.session)), r.method === 'HEAD');
}

/** GET /outboxes/<name>/jobs/<id> and …/<id>.json */
export function job(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox, id: string): void {
  const json = id.endsWith('.json');
  const j = env.jobs.get(json ? id.slice(0, -5) : id);
  if (!j || j.outbox !== o.name) {
    if (json) return sendJson(r.res, 404, { error: 'no such job' }, r.method === 'HEAD');
    throw new HttpError(404, 'There is no such replay job (jobs are kept in memory: a restart forgets them).', 'Not found');
  }
  if (json) return sendJson(r.res, 200, progressOf(j), r.method === 'HEAD');
  sendPage(r.res, 200, jobPage(pageContext(env, r), j, takeFlash(r.session)), r.method === 'HEAD');
}
