import { html, type Html } from './html.js';
import { formatNumber, formatTime, hexDump, prettyJsonText, HEX_DUMP_MAX_BYTES, JSON_MAX_CHARS } from './format.js';
import { layout, outboxPath, tableWrap, type PageContext } from './layout.js';
import type { Notice } from './sessions.js';
import type { DeadLetterDetail } from '../model.js';

// One dead letter: what it is (ids, topic, key, times, attempts), why it failed, its
// headers and its payload (JSON indented, bytes as a hex dump), and for an operator the
// way to replay or discard it.

/** A header value that is not a string, as JSON; one nested too deep to print says so (JSON.stringify recurses). */
function headerJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return '(a value nested too deep to show)';
  }
}

/** The detail page of a dead letter. */
export function deadLetterPage(ctx: PageContext, outbox: string, d: DeadLetterDetail, notices: Notice[] = []): Html {
  const base = outboxPath(ctx.prefix, outbox, 'dead-letters');
  const headers = Object.entries(d.headers ?? {});
  const payload = d.payloadBytes
    ? html`<p>${formatNumber(d.payloadBytes.length)} bytes${d.payloadBytes.length > HEX_DUMP_MAX_BYTES ? html`, the first ${formatNumber(HEX_DUMP_MAX_BYTES)} shown` : ''}.</p>
<pre tabindex="0" aria-label="Payload bytes, hex dump">${hexDump(d.payloadBytes)}</pre>`
    : d.payloadText === null || d.payloadText === 'null'
      ? html`<p>No payload (null).</p>`
      : html`${d.payloadText.length > JSON_MAX_CHARS ? html`<p>${formatNumber(d.payloadText.length)} characters: the first part is shown, up to ${formatNumber(JSON_MAX_CHARS)} characters indented.</p>` : ''}<pre tabindex="0" aria-label="Payload, JSON">${prettyJsonText(d.payloadText)}</pre>`;
  const operator = ctx.session?.role === 'operator';
  const body = html`
<p><a href="${base}">Back to the dead letters</a></p>
<section aria-labelledby="what-heading">
  <h2 id="what-heading">What</h2>
  <dl class="fields">
    <dt>Outbox id</dt><dd>${d.id}</dd>
    <dt>Message id</dt><dd><code>${d.messageId}</code> (kept by a replay)</dd>
    <dt>Topic</dt><dd>${d.topic}</dd>
    <dt>Key</dt><dd><code>${d.key}</code>${d.key === '' ? ' (empty)' : ''}</dd>
    <dt>Written</dt><dd>${formatTime(d.createdAt)}</dd>
    <dt>Dedup key</dt><dd>${d.dedupKey === null ? 'none' : html`<code>${d.dedupKey}</code>`}</dd>
  </dl>
</section>
<section aria-labelledby="why-heading">
  <h2 id="why-heading">Why it was dead-lettered</h2>
  <dl class="fields">
    <dt>Error name</dt><dd><code>${d.errorName}</code></dd>
    <dt>Reason</dt><dd>${d.reason}</dd>
    <dt>Attempts</dt><dd>${formatNumber(d.attempts)}</dd>
    <dt>First failed</dt><dd>${formatTime(d.firstFailedAt)}</dd>
    <dt>Dead-lettered</dt><dd>${formatTime(d.deadLetteredAt)}</dd>
    <dt>Policy</dt><dd>${d.policy === 'park' ? 'park: later rows of its key wait for it' : 'skip: later rows of its key went on without it'}</dd>
    <dt>Parks its key</dt><dd>${d.parksKey ? html`<span class="badge warn">yes</span> the key's later rows wait until it is replayed or discarded` : 'no'}</dd>
  </dl>
</section>
${operator
  ? html`<div class="actions">
  <a class="button" href="${base}/replay?scope=ids&amp;id=${d.id}">Replay this dead letter…</a>
  <a class="button secondary" href="${base}/discard?scope=ids&amp;id=${d.id}">Discard this dead letter…</a>
</div>`
  : ''}
<section aria-labelledby="headers-heading">
  <h2 id="headers-heading">Headers</h2>
  ${headers.length === 0
    ? html`<p>No headers.</p>`
    : tableWrap(
        'Headers',
        html`<table>
    <caption>Kafka headers</caption>
    <thead><tr><th scope="col">Name</th><th scope="col">Value</th></tr></thead>
    <tbody>${headers.map(([k, v]) => html`<tr><th scope="row"><code>${k}</code></th><td class="text"><code>${typeof v === 'string' ? v : headerJson(v)}</code></td></tr>`)}</tbody>
  </table>`,
      )}
</section>
<section aria-labelledby="payload-heading">
  <h2 id="payload-heading">Payload</h2>
  ${payload}
</section>`;
  return layout({ ...ctx, outbox, section: 'dead-letters' }, `Dead letter ${d.id}`, body, notices);
}
