import { html, type Html } from './html.js';
import { formatNumber, formatTime } from './format.js';
import { layout, outboxPath, tableWrap, type PageContext } from './layout.js';
import { progressOf, type ReplayJob } from './jobs.js';
import type { Notice } from './sessions.js';

// A replay job as it runs (done of total, rate, a cancel button) and once it ended (what
// moved, what was left in place and why); the list of an outbox's recent jobs.

const STATUS: Record<ReplayJob['status'], string> = { running: 'running', done: 'finished', stopped: 'cancelled', failed: 'failed' };

function statusBadge(job: ReplayJob): Html {
  const kind = job.status === 'done' ? 'ok' : job.status === 'running' ? 'warn' : 'bad';
  return html`<span class="badge ${kind}">${STATUS[job.status]}</span>`;
}

/** The page of one job. */
export function jobPage(ctx: PageContext, job: ReplayJob, notices: Notice[] = []): Html {
  const base = outboxPath(ctx.prefix, job.outbox, `jobs/${job.id}`);
  const p = progressOf(job);
  const operator = ctx.session?.role === 'operator';
  const r = job.result;
  const outcome = r
    ? html`<section aria-labelledby="outcome-heading">
  <h2 id="outcome-heading">Outcome</h2>
  <p>Replayed ${formatNumber(r.replayed)} of ${formatNumber(r.selected)}${r.ratePerSecond === null ? '' : ` at ${r.ratePerSecond.toFixed(1)}/s`}${job.cancelledBy ? `; cancelled by ${job.cancelledBy}, the others are still dead letters` : ''}.</p>
  ${r.releasedKeys.length ? html`<p>Released ${formatNumber(r.releasedKeys.length)} parked ${r.releasedKeys.length === 1 ? 'key' : 'keys'}.</p>` : ''}
  ${r.waiting.length
    ? html`<p>${formatNumber(r.waiting.length)} moved back but wait behind keys still parked by dead letters ${[...new Set(r.waiting.map((w) => w.parkedBehind))].join(', ')}.</p>`
    : ''}
  ${r.notMoved.length
    ? html`<div class="notice warn" role="status">${formatNumber(r.notMoved.length)} left in place:
    ${r.notMoved.filter((n) => n.why === 'conflict').length ? html`${r.notMoved.filter((n) => n.why === 'conflict').map((n) => n.id).join(', ')} (a row with the same id or dedup key is in the outbox); ` : ''}
    ${r.notMoved.filter((n) => n.why === 'gone').length ? html`${r.notMoved.filter((n) => n.why === 'gone').map((n) => n.id).join(', ')} (replayed or discarded by someone else meanwhile)` : ''}</div>`
    : ''}
</section>`
    : '';
  const body = html`
<dl class="fields">
  <dt>Status</dt><dd>${statusBadge(job)}</dd>
  <dt>Outbox</dt><dd>${job.outbox}</dd>
  <dt>Selection</dt><dd>${job.selection}</dd>
  <dt>Rate asked</dt><dd>${job.rate}/s</dd>
  <dt>Started</dt><dd>${formatTime(job.startedAt)} by ${job.user}</dd>
  ${job.finishedAt ? html`<dt>Ended</dt><dd>${formatTime(job.finishedAt)}</dd>` : ''}
</dl>
<section aria-labelledby="progress-heading"${job.status === 'running' ? html` data-job-progress="${base}.json"` : ''}>
  <h2 id="progress-heading">Progress</h2>
  <progress max="${Math.max(p.expected, 1)}" value="${p.done}" aria-labelledby="progress-heading"></progress>
  <p><span data-field="done">${p.done}</span> of <span data-field="expected">${p.expected}</span> handled:
    <span data-field="moved">${p.moved}</span> moved, <span data-field="notMoved">${p.notMoved}</span> left in place;
    rate <span data-field="rate">${p.ratePerSecond === null ? '–' : `${p.ratePerSecond.toFixed(1)}/s`}</span>,
    <span data-field="elapsed">${p.elapsedSeconds.toFixed(0)} s</span> so far.</p>
</section>
${job.error ? html`<div class="notice error" role="alert">The replay failed: ${job.error}</div>` : ''}
${outcome}
<div class="actions">
  ${job.status === 'running' && operator
    ? html`<form method="post" action="${base}/cancel" aria-label="Cancel the replay">
    <input type="hidden" name="_csrf" value="${ctx.session?.csrfToken ?? ''}">
    <button type="submit" class="danger">Cancel the replay</button>
  </form>`
    : ''}
  ${job.status === 'running' ? html`<a href="${base}">Refresh</a>` : ''}
  <a href="${outboxPath(ctx.prefix, job.outbox, 'dead-letters')}">Dead letters</a>
  <a href="${outboxPath(ctx.prefix, job.outbox, 'jobs')}">All replay jobs</a>
</div>`;
  return layout({ ...ctx, outbox: job.outbox, section: 'jobs' }, `Replay job ${job.id}`, body, notices);
}

/** The recent replay jobs of an outbox (this console process's, newest first). */
export function jobsPage(ctx: PageContext, outbox: string, jobs: readonly ReplayJob[], notices: Notice[] = []): Html {
  const body = html`
<p>Replays started from this console since it started, newest first. One replay runs per outbox at a time.</p>
${jobs.length === 0
  ? html`<p>No replay yet.</p>`
  : tableWrap(
      'Replay jobs',
      html`<table>
    <caption>Replay jobs</caption>
    <thead><tr><th scope="col">Job</th><th scope="col">Status</th><th scope="col">Started</th><th scope="col">By</th><th scope="col">Selection</th><th scope="col" class="num">Moved</th><th scope="col" class="num">Rate asked</th></tr></thead>
    <tbody>${jobs.map(
      (j) => html`<tr>
      <td><a href="${outboxPath(ctx.prefix, outbox, `jobs/${j.id}`)}">${j.id}</a></td>
      <td>${statusBadge(j)}</td>
      <td>${formatTime(j.startedAt)}</td>
      <td>${j.user}</td>
      <td class="text">${j.selection}</td>
      <td class="num">${formatNumber(j.moved)} of ${formatNumber(j.result?.selected ?? j.expected)}</td>
      <td class="num">${j.rate}/s</td>
    </tr>`,
    )}</tbody>
  </table>`,
    )}`;
  return layout({ ...ctx, outbox, section: 'jobs' }, 'Replay jobs', body, notices);
}
