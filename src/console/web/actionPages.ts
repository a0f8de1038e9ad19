import { html, type Html } from './html.js';
import { formatAge, formatCount, formatNumber, formatTime } from './format.js';
import { layout, outboxPath, tableWrap, type PageContext } from './layout.js';
import { describeSelection, selectionFields, type Selection } from './selection.js';
import type { Notice, Session } from './sessions.js';
import type { CappedCount } from '../model.js';
import type { DeadLetter } from '../../commands/deadLetterSelection.js';

// The confirmation step of every action: what it would act on (a dry-run count and the
// first rows), what it does, and the one form that does it (POST, with the session's CSRF
// token). Nothing changes before that form is sent.

/** Rows of the selection a confirmation shows. */
export const PREVIEW_ROWS = 20;

function csrf(session: Session | undefined): Html {
  return html`<input type="hidden" name="_csrf" value="${session?.csrfToken ?? ''}">`;
}

function preview(rows: readonly DeadLetter[], count: CappedCount, base: string): Html {
  if (rows.length === 0) return html``;
  return html`${tableWrap(
    'Dead letters selected',
    html`<table>
    <caption>${rows.length < count.count ? `The first ${rows.length} of ${formatCount(count)}` : 'The dead letters'} (lowest id first)</caption>
    <thead><tr><th scope="col" class="num">Id</th><th scope="col">Topic</th><th scope="col">Key</th><th scope="col">Error name</th><th scope="col">Reason</th></tr></thead>
    <tbody>${rows.map(
      (d) => html`<tr><td class="num"><a href="${base}/${d.id}">${d.id}</a></td><td class="text">${d.topic}</td><td class="text"><code>${d.key}</code></td><td class="text">${d.errorName}</td><td class="text">${d.reason.length > 160 ? `${d.reason.slice(0, 159)}…` : d.reason}</td></tr>`,
    )}</tbody>
  </table>`,
  )}`;
}

/** Confirm a replay: the dry-run count, the rate, then POST. */
export function replayConfirmPage(ctx: PageContext, outbox: string, s: Selection, count: CappedCount, rows: readonly DeadLetter[], defaultRate: number, notices: Notice[] = [], seen?: string): Html {
  const base = outboxPath(ctx.prefix, outbox, 'dead-letters');
  const n = count.count;
  const seconds = n / defaultRate;
  const body = html`
<p role="status"><strong>Dry run:</strong> ${formatCount(count)} ${n === 1 && !count.capped ? 'dead letter' : 'dead letters'} selected (${describeSelection(s)}). Nothing has moved yet.</p>
${count.capped
  ? html`<div class="notice warn" role="alert">More than ${formatNumber(n)} match: this replay moves the first ${formatNumber(n)} (lowest ids first). Run it again for the rest.</div>`
  : ''}
<p>Each dead letter goes back into the outbox under its original id and message id (consumers deduplicate a replay by message id), one per transaction, lowest id first, at the rate you choose. A key it parks is released. Fix the cause first: a row that fails again comes back as a dead letter.</p>
${preview(rows, count, base)}
${n === 0
  ? html`<p><a href="${base}">Back to the dead letters</a></p>`
  : html`<form method="post" action="${base}/replay" aria-label="Replay">
  ${csrf(ctx.session)}
  ${selectionFields(s)}
  <input type="hidden" name="expected" value="${n}">
  ${seen ? html`<input type="hidden" name="seen" value="${seen}">` : ''}
  <div>
    <label for="rate">Rate, dead letters per second</label><span class="hint" id="rate-hint">at most 1000; at ${formatNumber(defaultRate)}/s these take about ${formatAge(seconds)}</span>
    <input type="number" id="rate" name="rate" value="${defaultRate}" min="0.1" max="1000" step="any" required aria-describedby="rate-hint">
  </div>
  <div class="actions">
    <button type="submit">Replay ${formatNumber(n)} ${n === 1 ? 'dead letter' : 'dead letters'}</button>
    <a class="button secondary" href="${base}">Cancel</a>
  </div>
</form>`}`;
  return layout({ ...ctx, outbox, section: 'dead-letters' }, 'Replay dead letters', body, notices);
}

/** Confirm a discard: the dry-run count, an explicit "for good" box, then POST. */
export function discardConfirmPage(ctx: PageContext, outbox: string, s: Selection, count: CappedCount, rows: readonly DeadLetter[], notices: Notice[] = [], seen?: string): Html {
  const base = outboxPath(ctx.prefix, outbox, 'dead-letters');
  const n = count.count;
  const what = `${formatNumber(n)} ${n === 1 ? 'dead letter' : 'dead letters'}`;
  const body = html`
<p role="status"><strong>Dry run:</strong> ${formatCount(count)} ${n === 1 && !count.capped ? 'dead letter' : 'dead letters'} selected (${describeSelection(s)}). Nothing has been deleted yet.</p>
<p>Discarding deletes them for good: they are never published. A key one of them parks is released, and its waiting rows go on without it.</p>
${preview(rows, count, base)}
${count.capped
  ? html`<div class="notice error" role="alert">More than ${formatNumber(n)} match: the console discards at most ${formatNumber(n)} at once. Narrow the filter, or use <code>outbox-relay dead-letters discard</code>.</div>
<p><a href="${base}">Back to the dead letters</a></p>`
  : n === 0
    ? html`<p><a href="${base}">Back to the dead letters</a></p>`
    : html`<form method="post" action="${base}/discard" aria-label="Discard">
  ${csrf(ctx.session)}
  ${selectionFields(s)}
  <input type="hidden" name="expected" value="${n}">
  ${seen ? html`<input type="hidden" name="seen" value="${seen}">` : ''}
  <div><label><input type="checkbox" name="confirm" value="yes" required> I understand: ${n === 1 ? 'this dead letter is' : html`these ${what} are`} deleted for good</label></div>
  <div class="actions">
    <button type="submit" class="danger">Discard ${what}</button>
    <a class="button secondary" href="${base}">Cancel</a>
  </div>
</form>`}`;
  return layout({ ...ctx, outbox, section: 'dead-letters' }, 'Discard dead letters', body, notices);
}

/** Confirm unparking a key: what parks it, what happens to its waiting rows. */
export function unparkConfirmPage(ctx: PageContext, outbox: string, key: { topic: string; key: string }, parking: DeadLetter | null): Html {
  const dead = outboxPath(ctx.prefix, outbox, 'dead-letters');
  const parked = outboxPath(ctx.prefix, outbox, 'parked-keys');
  const body = html`
<dl class="fields">
  <dt>Topic</dt><dd>${key.topic}</dd>
  <dt>Key</dt><dd><code>${key.key}</code></dd>
  ${parking
    ? html`<dt>Parked behind</dt><dd><a href="${dead}/${parking.id}">dead letter ${parking.id}</a> (${parking.errorName}), dead-lettered ${formatTime(parking.deadLetteredAt)}</dd>
  <dt>Reason</dt><dd>${parking.reason}</dd>`
    : ''}
</dl>
<p>Unparking lets the key's waiting rows be published <strong>without</strong> ${parking ? `dead letter ${parking.id}` : 'the dead letter that parks it'}, which stays a dead letter (its policy becomes skip): replayed later, it is published after the rows that went ahead of it. To publish it first, replay it instead${parking ? html` (<a href="${dead}/replay?scope=ids&amp;id=${parking.id}">replay dead letter ${parking.id}</a>)` : ''}.</p>
<form method="post" action="${parked}/unpark" aria-label="Unpark">
  ${csrf(ctx.session)}
  ${parking
    ? html`<input type="hidden" name="deadLetter" value="${parking.id}">`
    : html`<input type="hidden" name="topic" value="${key.topic}">
  <input type="hidden" name="key" value="${key.key}">`}
  <div class="actions">
    <button type="submit" class="danger">Unpark this key</button>
    <a class="button secondary" href="${parked}">Cancel</a>
  </div>
</form>`;
  return layout({ ...ctx, outbox, section: 'parked-keys' }, 'Unpark a key', body);
}
