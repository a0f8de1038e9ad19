import { html, type Html, type HtmlValue } from './html.js';
import { SCRIPT, STYLESHEET } from './assets.js';
import type { Notice, Session } from './sessions.js';

// The frame of every page: head, a skip link, the site header with the outbox's sections
// and the logged-in user, one <main> with the page's <h1>. Every link is a path under the
// console's prefix.

/** The parts of an outbox's pages, as its navigation lists them. */
export type Section = 'overview' | 'dead-letters' | 'parked-keys' | 'jobs';

const SECTIONS: Array<[Section, string, string]> = [
  ['overview', '', 'Overview'],
  ['dead-letters', 'dead-letters', 'Dead letters'],
  ['parked-keys', 'parked-keys', 'Parked keys'],
  ['jobs', 'jobs', 'Replay jobs'],
];

/** What a page knows about where it is. */
export interface PageContext {
  /** The path prefix ('' or /outbox). */
  prefix: string;
  session: Session | undefined;
  /** How many outboxes the console shows (a landing page when more than one). */
  outboxCount: number;
  /** The outbox of the page, if it belongs to one. */
  outbox?: string;
  section?: Section;
}

/** The path of an outbox's page: outboxPath(ctx.prefix, 'orders', 'dead-letters'). */
export function outboxPath(prefix: string, outbox: string, rest = ''): string {
  return `${prefix}/outboxes/${encodeURIComponent(outbox)}/${rest}`;
}

/** A whole page. `title` is the <h1> and the start of <title>. */
export function layout(ctx: PageContext, title: string, body: HtmlValue, notices: readonly Notice[] = []): Html {
  const p = ctx.prefix;
  const nav = ctx.outbox
    ? html`<nav aria-label="Outbox ${ctx.outbox}"><ul>
        ${ctx.outboxCount > 1 ? html`<li><a href="${p}/">All outboxes</a></li>` : ''}
        ${SECTIONS.map(
          ([id, rest, label]) =>
            html`<li><a href="${outboxPath(p, ctx.outbox!, rest)}"${ctx.section === id ? html` aria-current="page"` : ''}>${label}</a></li>`,
        )}
      </ul></nav>`
    : '';
  const who = ctx.session
    ? html`<div class="who">
        <span>Signed in as <strong>${ctx.session.user}</strong> (${ctx.session.role})</span>
        <form method="post" action="${p}/logout"><input type="hidden" name="_csrf" value="${ctx.session.csrfToken}"><button type="submit">Log out</button></form>
      </div>`
    : '';
  const where = ctx.outbox ? ` · ${ctx.outbox}` : '';
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>${title}${where} · outbox-relay console</title>
<link rel="stylesheet" href="${p}/static/${STYLESHEET.name}" integrity="${STYLESHEET.integrity}">
<script src="${p}/static/${SCRIPT.name}" integrity="${SCRIPT.integrity}" defer></script>
</head>
<body>
<a class="skip-link" href="#main">Skip to content</a>
<header class="site">
  <a class="brand" href="${p}/">outbox-relay console${ctx.outbox && ctx.outboxCount > 1 ? html`<span class="visually-hidden">, all outboxes</span>` : ''}</a>
  ${ctx.outbox ? html`<span aria-hidden="true">${ctx.outbox}</span>` : ''}
  ${nav}
  ${who}
</header>
<main id="main" tabindex="-1">
${notices.map(notice)}
<h1>${title}</h1>
${body}
</main>
</body>
</html>
`;
}

/** A message box; errors and warnings are announced (role alert), others politely (status). */
export function notice(n: Notice): Html {
  const role = n.kind === 'info' ? 'status' : 'alert';
  return html`<div class="notice ${n.kind === 'info' ? '' : n.kind}" role="${role}">${n.text}</div>`;
}

/** A table in a box that scrolls sideways on a narrow screen, reachable by keyboard. */
export function tableWrap(label: string, table: Html): Html {
  return html`<div class="table-wrap" role="region" aria-label="${label}" tabindex="0">${table}</div>`;
}
