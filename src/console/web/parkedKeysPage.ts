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

/** The cursor of a page link (`at`, `topic`, `key` after the last row shown), or null. */
export function cursorFrom(params: URLSearchParams): ParkedKeyCursor | null {
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

function cursorParams(c: ParkedKeyCursor): URLSearchParams {
  return new URLSearchParams([
    ['afterAt', c.parkedAt.toISOString()],
    ['afterTopic', c.topic],
    ['afterKey', c.key],
  ]);
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
      const q = new URLSearchParams([['topic', k.topic], ['key', k.key]]).toString();
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
  ${page.next ? html`<a href="${base}?${cursorParams(page.next).toString()}" rel="next">Next page</a>` : ''}
</nav>`;
  return layout({ ...ctx, outbox, section: 'parked-keys' }, 'Parked keys', body, notices);
}
