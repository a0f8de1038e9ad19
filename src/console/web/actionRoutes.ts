import { createHash } from 'node:crypto';
import { optionValue } from '../../shared/settings.js';
import { replayRate } from '../../commands/options.js';
import { ConfigError } from '../../shared/errors.js';
import { audit, type AuditEvent } from './audit.js';
import { checkedForm } from './auth.js';
import { httpErrorOf, pageContext, type ConsoleEnv, type ConsoleOutbox, type ConsoleRequest } from './context.js';
import { HttpError, redirect, sendPage } from './http.js';
import { outboxPath } from './layout.js';
import { discardConfirmPage, PREVIEW_ROWS, replayConfirmPage, unparkConfirmPage } from './actionPages.js';
import { auditSelection, describeSelection, selectionFilter, selectionFrom, type Selection } from './selection.js';
import { formatNumber } from './format.js';
import { checkText } from './filters.js';
import type { ReplayJob } from './jobs.js';
import { KeyNotParkedError } from '../../commands/parkedKeys.js';
import type { Notice, Session } from './sessions.js';

// What an operator does: replay (a job), discard, unpark, cancel a replay. Each goes
// through a confirmation page (GET: a dry-run count, nothing changes) and a POST checked
// for origin and CSRF token; the database acts through the same functions as the CLI.
// Every POST writes one audit line, refused or not.

/** Most dead letters one action of the console takes; more: narrow the filter or use the CLI. */
export const ACTION_CAP = 10_000;

/** The session of an operator, or HttpError 403. */
export function requireOperator(r: ConsoleRequest): Session {
  const s = r.session;
  if (!s || s.role !== 'operator') throw new HttpError(403, 'Only an operator may do this; you are logged in as a viewer. Nothing was changed.', 'Forbidden');
  return s;
}

/**
 * Dry-run count and preview of a selection; ids that are gone drop out of it. A filter's
 * (or all's) matches are read as ids, up to {@link ACTION_CAP}: their digest goes into the
 * confirmation's form, and the action takes exactly that set or nothing.
 */
async function dryRun(env: ConsoleEnv, o: ConsoleOutbox, s: Selection) {
  if (s.scope === 'ids') {
    const page = await env.data.searchDeadLetters(o.pool, o.schema, { ids: s.ids }, { afterId: null, limit: s.ids.length });
    const found = page.deadLetters.map((d) => d.id);
    const gone = s.ids.length - found.length;
    const selection: Selection = found.length ? { scope: 'ids', ids: found } : s;
    return { selection, count: { count: found.length, capped: false }, rows: page.deadLetters.slice(0, PREVIEW_ROWS), gone, seen: undefined };
  }
  const filter = selectionFilter(s);
  const [matched, page] = await Promise.all([
    env.data.matchingIds(o.pool, o.schema, filter, ACTION_CAP),
    env.data.searchDeadLetters(o.pool, o.schema, filter, { afterId: null, limit: PREVIEW_ROWS }),
  ]);
  return { selection: s, count: { count: matched.ids.length, capped: matched.capped }, rows: page.deadLetters, gone: 0, seen: idsDigest(matched.ids) };
}

/** A digest of a set of ids (sorted): what a confirmation saw, compared when its form comes back. */
export function idsDigest(ids: readonly number[]): string {
  return createHash('sha256').update(ids.join(',')).digest('base64url');
}

/**
 * The ids a filter's (or all's) action takes: those that match now, which must be the
 * very set the confirmation showed (its digest in the form); otherwise nothing is done.
 *
 * @throws HttpError 409 when the set changed, 400 when the form lacks the digest
 */
async function confirmedIds(env: ConsoleEnv, o: ConsoleOutbox, s: Selection, form: URLSearchParams, expected: number, verb: string): Promise<number[]> {
  const seen = form.get('seen');
  if (!seen || !/^[A-Za-z0-9_-]{43}$/.test(seen)) throw new HttpError(400, 'The form lacks what the confirmation showed: start again from the confirmation page.');
  const now = await env.data.matchingIds(o.pool, o.schema, selectionFilter(s), ACTION_CAP);
  if (idsDigest(now.ids) !== seen) {
    throw new HttpError(
      409,
      `The dead letters of this selection changed since the confirmation (${formatNumber(expected)} confirmed, ${formatNumber(now.ids.length)}${now.capped ? '+' : ''} match now: some arrived, or were replayed or discarded meanwhile). Nothing was ${verb}: confirm again.`,
      'The selection changed',
    );
  }
  return now.ids;
}

/** GET …/dead-letters/replay and …/discard: the confirmation with the dry-run count. */
export async function confirmAction(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox, action: 'replay' | 'discard'): Promise<void> {
  requireOperator(r);
  const run = await dryRun(env, o, selectionFrom(r.query));
  const ctx = pageContext(env, r);
  const notices: Notice[] = run.gone > 0 ? [{ kind: 'warn', text: `${run.gone} of the selected dead letters are gone (replayed or discarded meanwhile).` }] : [];
  const page =
    action === 'replay'
      ? replayConfirmPage(ctx, o.name, run.selection, run.count, run.rows, env.defaultRate, notices, run.seen)
      : discardConfirmPage(ctx, o.name, run.selection, run.count, run.rows, notices, run.seen);
  sendPage(r.res, 200, page, r.method === 'HEAD');
}

function positiveCount(form: URLSearchParams): number {
  const n = Number(form.get('expected'));
  if (!Number.isSafeInteger(n) || n < 1 || n > ACTION_CAP) throw new HttpError(400, 'The confirmed count is missing or out of range: start again from the confirmation page.');
  return n;
}

/** Run `act`, auditing its outcome (and a refusal or failure as such), then rethrow errors. */
async function audited<T>(env: ConsoleEnv, base: Omit<AuditEvent, 'outcome'>, act: () => Promise<T>): Promise<T> {
  try {
    return await act();
  } catch (error) {
    const e = httpErrorOf(error, base.outbox);
    audit(env.logger, { ...base, outcome: e.status >= 500 ? 'failed' : 'refused', detail: e.message });
    throw error;
  }
}

/** POST …/dead-letters/replay: start a replay job at the rate given, of at most the confirmed count. */
export async function startReplay(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  const session = r.session!;
  const who = { user: session.user, role: session.role, action: 'replay.start' as const, outbox: o.name, remoteAddress: r.remoteAddress };
  let job: ReplayJob | undefined;
  await audited(env, who, async () => {
    const form = await checkedForm(env, r, session);
    requireOperator(r);
    const s = selectionFrom(form);
    const expected = positiveCount(form);
    let rate: number;
    try {
      rate = optionValue(replayRate, Number(form.get('rate') ?? ''));
    } catch (error) {
      if (error instanceof ConfigError) throw new HttpError(400, `The rate ${error.message.slice(error.setting.length + 2)} (dead letters per second).`);
      throw error;
    }
    const selection = { ...who, selection: auditSelection(s) };
    // A filter's replay takes exactly the dead letters its confirmation showed.
    const ids = s.scope === 'ids' ? s.ids : await confirmedIds(env, o, s, form, expected, 'replayed');
    let answered = false;
    job = await env.jobs.start(
      { outbox: o.name, user: session.user, selection: describeSelection(s), rate, expected },
      (signal, onProgress) =>
        env.data.replayDeadLetters({
          pool: o.pool,
          schema: o.schema,
          ids,
          rate,
          signal,
          onProgress,
          logger: env.logger.child({ component: 'console-replay', outbox: o.name }),
        }),
      {
        onEnd: (j) => {
          // Failed before this request was answered: that answer (and its audit line) says so.
          if (!answered && j.status === 'failed' && j.done === 0) return;
          const outcome = j.status === 'failed' ? 'failed' : 'ok';
          audit(env.logger, {
            ...selection,
            action: 'replay',
            outcome,
            job: j.id,
            rows: j.result?.replayed ?? j.moved,
            selected: j.result?.selected ?? j.expected,
            notMoved: j.result?.notMoved.length ?? j.notMoved,
            releasedKeys: j.result?.releasedKeys.length ?? 0,
            stopped: j.status === 'stopped',
            ...(j.cancelledBy ? { cancelledBy: j.cancelledBy } : {}),
            ...(j.error ? { detail: j.status === 'failed' ? httpErrorOf(j.cause, o.name).message : j.error } : {}),
            rate,
          });
        },
      },
    );
    // Failed before moving anything (a missing privilege, the rows gone): this request's error.
    if (job.status === 'failed' && job.done === 0) throw job.cause;
    answered = true;
    audit(env.logger, { ...selection, outcome: 'ok', job: job.id, rows: expected, rate });
  });
  redirect(r.res, outboxPath(env.prefix, o.name, `jobs/${job!.id}`));
}

/** POST …/dead-letters/discard: delete the confirmed dead letters (no more than confirmed). */
export async function discard(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  const session = r.session!;
  const who = { user: session.user, role: session.role, action: 'discard' as const, outbox: o.name, remoteAddress: r.remoteAddress };
  const result = await audited(env, who, async () => {
    const form = await checkedForm(env, r, session);
    requireOperator(r);
    const s = selectionFrom(form);
    const expected = positiveCount(form);
    if (form.get('confirm') !== 'yes') throw new HttpError(400, 'Tick the box that says the dead letters are deleted for good. Nothing was discarded.');
    // Exactly the set the confirmation showed, or nothing (a row that arrived since, or one
    // gone and another come in its place, changes the set even when the count is the same).
    const ids = s.scope === 'ids' ? s.ids : await confirmedIds(env, o, s, form, expected, 'discarded');
    const done = await env.data.discardDeadLetters({ pool: o.pool, schema: o.schema, ids, yes: true });
    audit(env.logger, { ...who, selection: auditSelection(s), outcome: 'ok', rows: done.discarded, releasedKeys: done.releasedKeys.length });
    return done;
  });
  const released = result.releasedKeys.length;
  session.flash = {
    kind: 'info',
    text: `Discarded ${formatNumber(result.discarded)} ${result.discarded === 1 ? 'dead letter' : 'dead letters'}; released ${released} parked ${released === 1 ? 'key' : 'keys'}.`,
  };
  redirect(r.res, outboxPath(env.prefix, o.name, 'dead-letters'));
}

/**
 * The parked key a request names: `deadLetter=<id>` (the dead letter it is parked behind:
 * what the pages send, as a key may be too long for a URL), or `topic` and `key`. Null:
 * that dead letter parks no key (any more).
 */
async function keyFrom(env: ConsoleEnv, o: ConsoleOutbox, params: URLSearchParams): Promise<{ topic: string; key: string } | null> {
  const byId = params.get('deadLetter');
  if (byId !== null) {
    if (!/^[1-9]\d{0,15}$/.test(byId) || !Number.isSafeInteger(Number(byId))) throw new HttpError(400, 'The dead letter id of the parked key is malformed.');
    return env.data.parkedKeyOf(o.pool, o.schema, Number(byId));
  }
  const topic = params.get('topic');
  const key = params.get('key');
  if (!topic || key === null || topic.length > 1_000 || key.length > 10_000) throw new HttpError(400, 'Name the parked key: its dead letter, or topic and key.');
  checkText('topic', topic);
  checkText('key', key);
  return { topic, key };
}

/** GET …/parked-keys/unpark?deadLetter=<id> (or ?topic&key): the confirmation. */
export async function confirmUnpark(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  requireOperator(r);
  const k = await keyFrom(env, o, r.query);
  if (!k) throw new HttpError(404, `Dead letter ${r.query.get('deadLetter')} parks no key (any more): the key was unparked, or its dead letter replayed or discarded.`, 'Not parked');
  const page = await env.data.searchDeadLetters(o.pool, o.schema, { topic: k.topic, key: k.key }, { afterId: null, limit: 100 });
  const parking = page.deadLetters.find((d) => d.parksKey) ?? null;
  sendPage(r.res, 200, unparkConfirmPage(pageContext(env, r), o.name, k, parking), r.method === 'HEAD');
}

/** POST …/parked-keys/unpark */
export async function unpark(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox): Promise<void> {
  const session = r.session!;
  const who = { user: session.user, role: session.role, action: 'unpark' as const, outbox: o.name, remoteAddress: r.remoteAddress };
  let key: { topic: string; key: string } | undefined;
  try {
    const result = await audited(env, who, async () => {
      const form = await checkedForm(env, r, session);
      requireOperator(r);
      const named = await keyFrom(env, o, form);
      if (!named) throw new KeyNotParkedError('', '');
      key = named;
      const done = await env.data.unparkKey({ pool: o.pool, schema: o.schema, ...key });
      audit(env.logger, { ...who, selection: key, outcome: 'ok', rows: 1, deadLetterId: done.deadLetterId, waiting: done.waiting });
      return done;
    });
    session.flash = {
      kind: 'info',
      text: `Unparked key ${JSON.stringify(shortKey(result.key))} of topic ${result.topic}: its ${formatNumber(result.waiting)}${result.waitingCapped ? ' or more' : ''} waiting rows go on; dead letter ${result.deadLetterId} stays a dead letter (policy skip now).`,
    };
  } catch (error) {
    if (!(error instanceof KeyNotParkedError)) throw error;
    session.flash = { kind: 'warn', text: key ? `Key ${JSON.stringify(shortKey(key.key))} of topic ${key.topic} is not parked (any more). Nothing changed.` : 'That dead letter parks no key (any more). Nothing changed.' };
  }
  redirect(r.res, outboxPath(env.prefix, o.name, 'parked-keys'));
}

/** A key as a message or an audit line quotes it: at most 200 characters. */
function shortKey(key: string): string {
  return key.length > 200 ? `${key.slice(0, 199)}…` : key;
}

/** POST …/jobs/<id>/cancel */
export async function cancelJob(env: ConsoleEnv, r: ConsoleRequest, o: ConsoleOutbox, id: string): Promise<void> {
  const session = r.session!;
  const who = { user: session.user, role: session.role, action: 'replay.cancel' as const, outbox: o.name, job: id, remoteAddress: r.remoteAddress };
  await audited(env, who, async () => {
    await checkedForm(env, r, session);
    requireOperator(r);
    const job = env.jobs.get(id);
    if (!job || job.outbox !== o.name) throw new HttpError(404, 'There is no such replay job.', 'Not found');
    const cancelled = env.jobs.cancel(id, session.user);
    audit(env.logger, { ...who, outcome: cancelled ? 'ok' : 'refused', rows: job.moved, ...(cancelled ? {} : { detail: 'not running' }) });
    session.flash = cancelled
      ? { kind: 'info', text: `Cancelling: the replay stops before its next row. ${formatNumber(job.moved)} moved so far stay moved.` }
      : { kind: 'warn', text: 'The replay had already ended.' };
  });
  redirect(r.res, outboxPath(env.prefix, o.name, `jobs/${id}`));
}
