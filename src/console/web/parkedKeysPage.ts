import { html, type Html } from './html.js';
import { formatAge, formatCount, formatTime } from './format.js';
import { layout, outboxPath, tableWrap, type PageContext } from './layout.js';
import { HttpError } from './http.js';
import { inTimeRange } from '../../commands/deadLetterSelection.js';
import type { Notice } from './sessions.js';
import type { ParkedKeyCursor } from './consoleData.js';
import type { ParkedKeyPage } from '../model.js';

// Parked keys: why (the dead letter that parks each), since when, how many rows wait
// behind it; parked longest first, a page at a time; for an operator, unpark.

/** Parked keys a page shows. */
export const PARKED_KEY_PAGE_SIZE = 50;

/**
 * The cursor of a page link: `after=<id>`, the dead letter of the last key shown (a key
 * may be too long for a URL), or the older `afterAt`, `afterTopic`, `afterKey`; null on
 * the first page. A dead letter id is looked up by `lookUp` (null: unparked since).
 *
 * @throws HttpError 400 for a malformed or stale link
 */
export async function cursorFrom(params: URLSearchParams, lookUp: (deadLetterId: number) => Promise<ParkedKeyCursor | null>): Promise<ParkedKeyCursor | null> {
  const afterId = params.get('after');
  if (afterId !== null) {
    const id = /^[1-9]\d{0,15}$/.test(afterId) ? Number(afterId) : NaN;
    const found = Number.isSafeInteger(id) ? await lookUp(id) : null;
    if (!found) throw new HttpError(400, 'The page link is malformed or its last key was unparked since: start again from the first page.');
    return found;
  }
  const at = params.get('afterAt');
  if (at === null) return null;
  const topic = params.get('afterTopic');
  const key = params.get('afterKey');
  const parkedAt = new Date(at);
  if (topic === null || key === null || !inTimeRange(parkedAt) || topic.length > 1_000 || key.length > 10_000 || topic.includes('\u0000') || key.includes('\u0000')) {
    throw new HttpError(400, 'The page link is malformed: start again from the first page.');
  }
  return { parkedAt, topic, key };
}

/** The parked keys page. */
export function parkedKeysPage(ctx: PageContext, outbox: string, after: ParkedKeyCursor | null, page: ParkedKeyPage, nowMs: number, notices: Notice[] = []): Html {
  const base = outboxPath(ctx.prefix, outbox, 'parked-keys');
  const dead = outboxPath(ctx.prefix, outbox, 'dead-letters');
  const operator = ctx.session?.role === 'operator';
  const rows = page.parkedKeys;
  const body = html`
<p>A key is parked when one of its rows was dead-lettered with policy park: its later rows wait, in order, until that dead letter is replayed or discarded, or the key is unparked.</p>
${rows.length === 0
  ? html`<p>No key is parked${after ? ' after this point' : ''}.</p>`
  : tableWrap(
      'Parked keys',
      html`<table>
    <caption>Parked keys, parked longest first</caption>
    <thead><tr><th scope="col">Topic</th><th scope="col">Key</th><th scope="col">Parked since</th><th scope="col">Behind dead letter</th><th scope="col">Why</th><th scope="col" class="num">Rows waiting</th>${operator ? html`<th scope="col"><span class="visually-hidden">Actions</span></th>` : ''}</tr></thead>
    <tbody>
    ${rows.map((k) => {
      // By its dead letter: a key of thousands of characters would not fit a URL (HTTP 431).
      const q = new URLSearchParams([['deadLetter', String(k.deadLetterId)]]).toString();
      return html`<tr>
      <td class="text">${k.topic}</td>
      <td class="text"><code>${k.key}</code></td>
      <td>${formatTime(k.parkedAt)} (${formatAge((nowMs - k.parkedAt.getTime()) / 1000)} ago)</td>
      <td class="num"><a href="${dead}/${k.deadLetterId}" aria-label="Dead letter ${k.deadLetterId}">${k.deadLetterId}</a></td>
      <td class="text"><code>${k.errorName}</code> ${k.reason.length > 160 ? `${k.reason.slice(0, 159)}…` : k.reason}</td>
      <td class="num">${formatCount(k.waiting)}</td>
      ${operator ? html`<td><a href="${base}/unpark?${q}" aria-label="Unpark key ${k.key} of topic ${k.topic}">Unpark…</a></td>` : ''}
    </tr>`;
    })}
    </tbody>
  </table>`,
    )}
<nav aria-label="Pages of parked keys" class="actions">
  ${after ? html`<a href="${base}">First page</a>` : ''}
  ${page.next && rows.length > 0 ? html`<a href="${base}?after=${rows[rows.length - 1]!.deadLetterId}" rel="next">Next page</a>` : ''}
</nav>`;
  return layout({ ...ctx, outbox, section: 'parked-keys' }, 'Parked keys', body, notices);
}
