import { html, type Html } from './html.js';
import { formatCount, formatNumber, formatTime } from './format.js';
import { layout, outboxPath, tableWrap, type PageContext } from './layout.js';
import { describeFilter, filterParams, isEmptyFilter, queryString } from './filters.js';
import type { Notice } from './sessions.js';
import type { ConsoleDeadLetterFilter, DeadLetterPage } from '../model.js';

// The dead-letter list: a filter (topic, key, reason, error name, time range, policy),
// one page of matches at a time (keyset: the next page starts after the last id shown),
// and for an operator, a selection to replay or discard, or every match of the filter.

/** Dead letters a page of the list shows. */
export const DEAD_LETTER_PAGE_SIZE = 50;

function textField(name: string, label: string, value: string | undefined, hint?: string): Html {
  const hintId = hint ? `${name}-hint` : undefined;
  return html`<div>
    <label for="f-${name}">${label}</label>${hint ? html`<span class="hint" id="${hintId}">${hint}</span>` : ''}
    <input type="text" id="f-${name}" name="${name}" value="${value ?? ''}"${hint ? html` aria-describedby="${hintId}"` : ''} autocomplete="off">
  </div>`;
}

function str(v: Date | string | undefined): string | undefined {
  return v instanceof Date ? v.toISOString() : v;
}

/** The filter form (GET): every field optional, empty means any. */
export function filterForm(action: string, f: ConsoleDeadLetterFilter): Html {
  return html`<form class="filter" method="get" action="${action}" role="search" aria-label="Filter dead letters">
  ${textField('topic', 'Topic', f.topic)}
  ${textField('key', 'Key', f.key)}
  ${textField('reason', 'Reason contains', f.reason, 'in the reason or the error name, any case')}
  ${textField('errorName', 'Error name', f.errorName, 'exactly: MESSAGE_TOO_LARGE')}
  ${textField('since', 'Dead-lettered since', str(f.since), 'ISO time (UTC) or ago: 30m, 2h, 7d')}
  ${textField('until', 'Dead-lettered before', str(f.until), 'ISO time (UTC) or ago')}
  <div>
    <label for="f-policy">Policy</label>
    <select id="f-policy" name="policy">
      <option value=""${f.policy === undefined ? html` selected` : ''}>any</option>
      <option value="park"${f.policy === 'park' ? html` selected` : ''}>park (its key waits)</option>
      <option value="skip"${f.policy === 'skip' ? html` selected` : ''}>skip</option>
    </select>
  </div>
  <div class="actions">
    <button type="submit">Apply filter</button>
    <a class="button secondary" href="${action}">Clear filter</a>
  </div>
</form>`;
}

/** The list page. `after` is the id this page starts after (null: the first page). */
export function deadLettersPage(ctx: PageContext, outbox: string, f: ConsoleDeadLetterFilter, after: number | null, page: DeadLetterPage, notices: Notice[] = []): Html {
  const base = outboxPath(ctx.prefix, outbox, 'dead-letters');
  const operator = ctx.session?.role === 'operator';
  const q = filterParams(f);
  const next = page.nextAfterId === null ? null : new URLSearchParams([...q, ['after', String(page.nextAfterId)]]);
  const scopeAll = isEmptyFilter(f) ? 'all' : 'filter';
  const matching = formatCount(page.matching);
  const rows = page.deadLetters;
  const table = html`<table>
    <caption>Dead letters${after !== null ? html`, after id ${after}` : ''} (lowest id first)</caption>
    <thead><tr>
      ${operator ? html`<th scope="col"><span class="visually-hidden">Selected</span></th>` : ''}
      <th scope="col" class="num">Id</th><th scope="col">Dead-lettered</th><th scope="col">Topic</th><th scope="col">Key</th>
      <th scope="col">Policy</th><th scope="col" class="num">Attempts</th><th scope="col">Error name</th><th scope="col">Reason</th>
    </tr></thead>
    <tbody>
    ${rows.map(
      (d) => html`<tr>
      ${operator ? html`<td><input type="checkbox" name="id" value="${d.id}" aria-label="Select dead letter ${d.id}"></td>` : ''}
      <td class="num"><a href="${base}/${d.id}" aria-label="Dead letter ${d.id}">${d.id}</a></td>
      <td>${formatTime(d.deadLetteredAt)}</td>
      <td class="text">${d.topic}</td>
      <td class="text"><code>${d.key}</code></td>
      <td>${d.policy}${d.parksKey ? html` <span class="badge warn">parks its key</span>` : ''}</td>
      <td class="num">${formatNumber(d.attempts)}</td>
      <td class="text">${d.errorName}</td>
      <td class="text">${d.reason.length > 200 ? `${d.reason.slice(0, 199)}…` : d.reason}</td>
    </tr>`,
    )}
    </tbody>
  </table>`;
  const list =
    rows.length === 0
      ? html`<p>No dead letter matches${after !== null ? ' after this point' : ''}.</p>`
      : operator
        ? html`<form method="get" action="${base}/replay" aria-label="Selected dead letters">
  <input type="hidden" name="scope" value="ids">
  <div data-select-all hidden><label><input type="checkbox"> Select all on this page</label></div>
  ${tableWrap('Dead letters', table)}
  <div class="actions">
    <button type="submit" formaction="${base}/replay">Replay selected…</button>
    <button type="submit" formaction="${base}/discard" class="secondary">Discard selected…</button>
  </div>
</form>`
        : tableWrap('Dead letters', table);
  const body = html`
${filterForm(base, f)}
<p role="status">${isEmptyFilter(f) ? `${matching} ${page.matching.count === 1 && !page.matching.capped ? 'dead letter' : 'dead letters'} in all.` : `${matching} ${page.matching.count === 1 && !page.matching.capped ? 'dead letter matches' : 'dead letters match'} ${describeFilter(f)}.`}</p>
${operator && page.matching.count > 0
  ? html`<div class="actions">
  <a class="button" href="${base}/replay${queryString(new URLSearchParams([['scope', scopeAll], ...q]))}">Replay all ${matching} matching…</a>
  <a class="button secondary" href="${base}/discard${queryString(new URLSearchParams([['scope', scopeAll], ...q]))}">Discard all ${matching} matching…</a>
</div>`
  : ''}
${list}
<nav aria-label="Pages of dead letters" class="actions">
  ${after !== null ? html`<a href="${base}${queryString(q)}">First page</a>` : ''}
  ${next ? html`<a href="${base}${queryString(next)}" rel="next">Next page</a>` : ''}
</nav>`;
  return layout({ ...ctx, outbox, section: 'dead-letters' }, 'Dead letters', body, notices);
}
