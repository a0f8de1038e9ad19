import { html, type Html } from './html.js';
import { formatAge, formatCount } from './format.js';
import { layout, notice, outboxPath, tableWrap, type PageContext } from './layout.js';
import type { Notice } from './sessions.js';
import type { OutboxOverview } from '../model.js';

// The login form, the list of outboxes, and error pages.

/** The login form; `next` is where to go after (a path of this console). */
export function loginPage(ctx: PageContext, next: string, problem?: string, user = ''): Html {
  const body = html`<div class="login">
${problem ? notice({ kind: 'error', text: problem }) : ''}
<form method="post" action="${ctx.prefix}/login" aria-label="Log in">
  <input type="hidden" name="next" value="${next}">
  <div>
    <label for="username">User name</label>
    <input type="text" id="username" name="username" value="${user}" autocomplete="username" autocapitalize="none" spellcheck="false" required>
  </div>
  <div>
    <label for="password">Password</label>
    <input type="password" id="password" name="password" autocomplete="current-password" required>
  </div>
  <div class="actions"><button type="submit">Log in</button></div>
</form>
</div>`;
  return layout({ ...ctx, session: undefined }, 'Log in to the outbox-relay console', body);
}

/** One outbox of the landing page: its overview, or why it could not be read. */
export type OutboxSummary = { name: string; overview: OutboxOverview } | { name: string; problem: string };

/** The landing page: every outbox of the list, with its backlog and dead letters. */
export function landingPage(ctx: PageContext, outboxes: readonly OutboxSummary[], notices: Notice[] = []): Html {
  const body = html`
${tableWrap(
  'Outboxes',
  html`<table>
  <caption>Outboxes of this console</caption>
  <thead><tr><th scope="col">Outbox</th><th scope="col" class="num">Backlog</th><th scope="col">Oldest pending</th><th scope="col" class="num">Dead letters</th><th scope="col" class="num">Parked keys</th><th scope="col">Relays live</th></tr></thead>
  <tbody>${outboxes.map((o) => {
    const link = html`<th scope="row"><a href="${outboxPath(ctx.prefix, o.name)}">${o.name}</a></th>`;
    if ('problem' in o) return html`<tr>${link}<td colspan="5"><span class="badge bad">unavailable</span> ${o.problem}</td></tr>`;
    const v = o.overview;
    return html`<tr>${link}
      <td class="num">${formatCount(v.backlog)}</td>
      <td>${v.oldestPendingSeconds === null ? 'nothing pending' : formatAge(v.oldestPendingSeconds)}</td>
      <td class="num"><a href="${outboxPath(ctx.prefix, o.name, 'dead-letters')}" aria-label="${formatCount(v.deadLetters.total)} dead letters in ${o.name}">${formatCount(v.deadLetters.total)}</a></td>
      <td class="num">${formatCount(v.parkedKeys)}</td>
      <td>${v.relays.filter((r) => r.live).length} of ${v.relays.length}</td>
    </tr>`;
  })}</tbody>
</table>`,
)}`;
  return layout(ctx, 'Outboxes', body, notices);
}

/** An error page: what went wrong and where to go from here. */
export function errorPage(ctx: PageContext, status: number, title: string, message: string): Html {
  const back = ctx.outbox ? outboxPath(ctx.prefix, ctx.outbox) : `${ctx.prefix}/`;
  const body = html`${notice({ kind: 'error', text: message })}
<p><a href="${back}">Back to ${ctx.outbox ? `outbox ${ctx.outbox}` : 'the start page'}</a></p>`;
  return layout(ctx, `${title} (${status})`, body);
}
