import { html, type Html } from './html.js';
import { formatNumber } from './format.js';
import { tableWrap } from './layout.js';
import type { MinuteFlow } from '../model.js';

// Ingress against egress over the last hour, drawn on the server as inline SVG: no chart
// library, no script, nothing inline for the Content-Security-Policy to allow (colours
// come from classes of the stylesheet). The same numbers follow in a table for screen
// readers and for anyone who wants them exact.

const WIDTH = 720;
const HEIGHT = 220;
const LEFT = 56;
const RIGHT = 12;
const TOP = 12;
const BOTTOM = 28;

/** A round number at or above `n`, for the top of the axis (1, 2, 5 × 10^k). */
function niceMax(n: number): number {
  if (n <= 1) return 1;
  const step = 10 ** Math.floor(Math.log10(n));
  for (const m of [1, 2, 5, 10]) if (m * step >= n) return m * step;
  return 10 * step;
}

const known = (m: MinuteFlow): boolean => m.recorded !== false;

/**
 * The polylines' points of one series: a run of recorded minutes each (a minute no relay
 * recorded is unknown, not zero: the line breaks there). A lone minute is a short dash.
 */
function runs(flow: readonly MinuteFlow[], pick: (m: MinuteFlow) => number | null, max: number): string[] {
  const w = WIDTH - LEFT - RIGHT;
  const h = HEIGHT - TOP - BOTTOM;
  const n = Math.max(flow.length - 1, 1);
  const out: string[][] = [];
  let current: string[] | undefined;
  flow.forEach((m, i) => {
    const v = known(m) ? pick(m) : null;
    if (v === null) {
      current = undefined;
      return;
    }
    const y = (TOP + h - (v / max) * h).toFixed(1);
    if (!current) out.push((current = []));
    current.push(`${(LEFT + (i * w) / n).toFixed(1)},${y}`);
  });
  return out.map((run) => {
    if (run.length > 1) return run.join(' ');
    const [x, y] = run[0]!.split(',').map(Number) as [number, number];
    return `${(x - 2).toFixed(1)},${y} ${(x + 2).toFixed(1)},${y}`;
  });
}

function series(flow: readonly MinuteFlow[], kind: string, pick: (m: MinuteFlow) => number | null, max: number): Html {
  return html`${runs(flow, pick, max).map((points) => html`<polyline class="line ${kind}" points="${points}"></polyline>`)}`;
}

/** The chart and its table, for an outbox's last hour (oldest minute first). */
export function flowChart(id: string, flow: readonly MinuteFlow[]): Html {
  const sum = (pick: (m: MinuteFlow) => number | null): number => flow.reduce((a, m) => a + (known(m) ? (pick(m) ?? 0) : 0), 0);
  const recorded = flow.filter(known).length;
  const ingress = sum((m) => m.ingress);
  // Rates over the minutes actually observed, not over an hour that is not full yet.
  const ingressMinutes = flow.filter((m) => known(m) && m.ingress !== null).length;
  const rate = (total: number, minutes: number): string => formatNumber(Math.round((total / minutes) * 10) / 10);
  const egress = sum((m) => m.egress);
  const dead = sum((m) => m.deadLettered);
  const max = niceMax(Math.max(0, ...flow.filter(known).flatMap((m) => [m.ingress ?? 0, m.egress, m.deadLettered])));
  const h = HEIGHT - TOP - BOTTOM;
  const ticks = [0, max / 2, max];
  const gaps = recorded === flow.length ? '' : ` ${recorded === 0 ? 'No minute' : `Only ${recorded} of ${flow.length} minutes`} recorded: no relay ran (or could write its counts) in the others, which are gaps, not zeros.`;
  const rates =
    ` Per minute: ingress ${ingressMinutes === 0 ? 'n/a (it needs two minutes recorded in a row)' : `${rate(ingress, ingressMinutes)} over the ${ingressMinutes === 1 ? 'minute' : `${ingressMinutes} minutes`} measured`},` +
    ` egress ${recorded === 0 ? 'n/a' : `${rate(egress, recorded)} over the ${recorded === 1 ? 'minute' : `${recorded} minutes`} recorded`}.`;
  const summary = `Last hour: ${formatNumber(ingress)} rows in, ${formatNumber(egress)} out, ${formatNumber(dead)} dead-lettered; the axis goes up to ${formatNumber(max)} ${max === 1 ? 'row' : 'rows'} a minute.${rates}${gaps}`;
  const xLabels: Array<[number, string]> = [
    [LEFT, '60 min ago'],
    [LEFT + (WIDTH - LEFT - RIGHT) / 2, '30 min ago'],
    [WIDTH - RIGHT, 'now'],
  ];
  return html`<figure class="chart" aria-labelledby="${id}-caption">
  <svg viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-labelledby="${id}-title ${id}-desc" focusable="false">
    <title id="${id}-title">Ingress and egress per minute</title>
    <desc id="${id}-desc">${summary}</desc>
    ${ticks.map((t) => {
      const y = (TOP + h - (t / max) * h).toFixed(1);
      return html`<line class="grid" x1="${LEFT}" x2="${WIDTH - RIGHT}" y1="${y}" y2="${y}"></line>
    <text class="label" x="${LEFT - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${formatNumber(t)}</text>`;
    })}
    <line class="axis" x1="${LEFT}" x2="${LEFT}" y1="${TOP}" y2="${TOP + h}"></line>
    <line class="axis" x1="${LEFT}" x2="${WIDTH - RIGHT}" y1="${TOP + h}" y2="${TOP + h}"></line>
    ${xLabels.map(([x, label], i) => html`<text class="label" x="${x}" y="${HEIGHT - 8}" text-anchor="${i === 0 ? 'start' : i === 1 ? 'middle' : 'end'}">${label}</text>`)}
    ${series(flow, 'ingress', (m) => m.ingress, max)}
    ${series(flow, 'egress', (m) => m.egress, max)}
    ${series(flow, 'dead', (m) => m.deadLettered, max)}
  </svg>
  <figcaption id="${id}-caption">
    <ul class="legend">
      <li><span class="key ingress" aria-hidden="true"></span>Ingress (rows written)</li>
      <li><span class="key egress" aria-hidden="true"></span>Egress (rows published)</li>
      <li><span class="key dead" aria-hidden="true"></span>Dead-lettered</li>
    </ul>
    ${summary}
  </figcaption>
</figure>
<details>
  <summary>The numbers, minute by minute</summary>
  ${tableWrap(
    'Ingress and egress per minute',
    html`<table>
    <caption>Rows per minute, last hour (UTC)</caption>
    <thead><tr><th scope="col">Minute</th><th scope="col" class="num">Ingress</th><th scope="col" class="num">Egress</th><th scope="col" class="num">Dead-lettered</th></tr></thead>
    <tbody>
    ${flow.map(
      (m) =>
        html`<tr><th scope="row">${m.minute.toISOString().slice(11, 16)}</th>${known(m)
          ? html`<td class="num">${m.ingress === null ? 'n/a' : formatNumber(m.ingress)}</td><td class="num">${formatNumber(m.egress)}</td><td class="num">${formatNumber(m.deadLettered)}</td>`
          : html`<td colspan="3">not recorded</td>`}</tr>`,
    )}
    </tbody>
  </table>`,
  )}
</details>`;
}
