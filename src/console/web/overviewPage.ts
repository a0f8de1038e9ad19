import { html, type Html } from './html.js';
import { flowChart } from './chart.js';
import { formatAge, formatCount, formatNumber, formatTime } from './format.js';
import { layout, outboxPath, tableWrap, type PageContext } from './layout.js';
import { filterParams, queryString } from './filters.js';
import type { Notice } from './sessions.js';
import type { OutboxOverview, RelayView } from '../model.js';

// An outbox at a glance, in the order of the runbook: how much waits and for how long,
// ingress against egress, what is parked, who relays it, what was dead-lettered and why.

function breaker(r: RelayView): Html {
  if (r.breaker === 'open') {
    return html`<span class="badge bad">open</span>${r.breakerOpenedAt ? html` since ${formatTime(r.breakerOpenedAt)}` : ''}`;
  }
  if (r.breaker === 'closed') return html`<span class="badge ok">closed</span>`;
  return html`<span class="badge warn">unknown</span>`;
}

/** The overview page of one outbox. */
export function overviewPage(ctx: PageContext, o: OutboxOverview, notices: Notice[] = []): Html {
  const p = ctx.prefix;
  const dl = (params: Record<string, string>): string => outboxPath(p, o.name, 'dead-letters') + queryString(filterParams(params));
  const liveRelays = o.relays.filter((r) => r.live).length;
  const body = html`
<p>Schema <code>${o.schema}</code>.</p>
<section aria-labelledby="now-heading">
  <h2 id="now-heading">Now</h2>
  <dl class="cards">
    <div><dt>Backlog (unsent rows)</dt><dd>${formatCount(o.backlog)}</dd></div>
    <div><dt>Oldest pending</dt><dd>${o.oldestPendingSeconds === null ? 'nothing pending' : formatAge(o.oldestPendingSeconds)}</dd></div>
    <div><dt>Parked keys</dt><dd><a href="${outboxPath(p, o.name, 'parked-keys')}">${formatCount(o.parkedKeys)}</a></dd></div>
    <div><dt>Dead letters</dt><dd><a href="${outboxPath(p, o.name, 'dead-letters')}">${formatCount(o.deadLetters.total)}</a></dd></div>
    <div><dt>Relays live</dt><dd>${formatNumber(liveRelays)} of ${formatNumber(o.relays.length)}</dd></div>
  </dl>
</section>
${o.oldestOutboxWriter && (o.oldestOutboxWriter.transactionAgeSeconds ?? 0) >= 1
  ? html`<div class="notice warn" role="status">An open transaction wrote the outbox and has not ended: pid ${String(o.oldestOutboxWriter.pid)} (${o.oldestOutboxWriter.applicationName || 'no application name'}, ${o.oldestOutboxWriter.state ?? 'state hidden'}), open ${formatAge(o.oldestOutboxWriter.transactionAgeSeconds ?? 0)}. Newer rows wait for it, up to the relay's horizon wait.</div>`
  : ''}
<section aria-labelledby="flow-heading">
  <h2 id="flow-heading">Ingress and egress, last hour</h2>
  ${flowChart('flow', o.flow)}
</section>
<section aria-labelledby="relays-heading">
  <h2 id="relays-heading">Relays and their shards</h2>
  ${o.unownedShards
    ? html`<div class="notice warn" role="status">No relay holds a valid lease on shards ${o.unownedShards}: their rows wait.</div>`
    : ''}
  ${o.relays.length === 0
    ? html`<p>No relay has registered on this outbox.</p>`
    : tableWrap(
        'Relays',
        html`<table>
    <caption>Relays of this outbox</caption>
    <thead><tr><th scope="col">Relay</th><th scope="col">State</th><th scope="col" class="num">Heartbeat age</th><th scope="col">Started</th><th scope="col">Shards held</th><th scope="col">Kafka breaker</th></tr></thead>
    <tbody>
    ${o.relays.map(
      (r) => html`<tr>
      <th scope="row"><code>${r.relayId}</code></th>
      <td>${r.live ? html`<span class="badge ok">live</span>` : html`<span class="badge bad">stale</span>`}</td>
      <td class="num">${formatAge(r.heartbeatAgeSeconds)}</td>
      <td>${formatTime(r.startedAt)}</td>
      <td>${r.shardCount === 0 ? 'none' : html`${formatNumber(r.shardCount)}: <code>${r.shards}</code>`}</td>
      <td>${breaker(r)}</td>
    </tr>`,
    )}
    </tbody>
  </table>`,
      )}
</section>
<section aria-labelledby="dead-heading">
  <h2 id="dead-heading">Dead letters by reason and topic</h2>
  ${o.deadLetters.byReason.length === 0
    ? html`<p>No dead letters.</p>`
    : html`${o.deadLetters.grouped?.capped
        ? html`<p>These groups count the newest ${formatCount(o.deadLetters.grouped)} dead letters of ${formatCount(o.deadLetters.total)}.</p>`
        : ''}${tableWrap(
        'Dead letters by reason',
        html`<table>
    <caption>By error and reason (most frequent first)</caption>
    <thead><tr><th scope="col">Error name</th><th scope="col">Reason</th><th scope="col" class="num">Dead letters</th></tr></thead>
    <tbody>
    ${o.deadLetters.byReason.map(
      (r) => html`<tr>
      <th scope="row"><a href="${dl({ errorName: r.errorName, reason: r.reason.slice(0, 200) })}">${r.errorName}</a></th>
      <td class="text">${r.reason}</td>
      <td class="num">${formatNumber(r.count)}</td>
    </tr>`,
    )}
    </tbody>
  </table>`,
      )}
  ${tableWrap(
    'Dead letters by topic',
    html`<table>
    <caption>By topic (most frequent first)</caption>
    <thead><tr><th scope="col">Topic</th><th scope="col" class="num">Dead letters</th></tr></thead>
    <tbody>
    ${o.deadLetters.byTopic.map((t) => html`<tr><th scope="row"><a href="${dl({ topic: t.topic })}">${t.topic}</a></th><td class="num">${formatNumber(t.count)}</td></tr>`)}
    </tbody>
  </table>`,
  )}`}
</section>`;
  return layout({ ...ctx, outbox: o.name, section: 'overview' }, `Outbox ${o.name}`, body, notices);
}
