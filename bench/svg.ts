/**
 * A tiny SVG line chart, enough for the benchmark's plots (no plotting dependency).
 */

export interface Series {
  name: string;
  points: Array<[number, number]>;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  width?: number;
  height?: number;
  /** Start the y axis at 0 (default true). */
  yFromZero?: boolean;
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#17becf', '#7f7f7f'];

function niceStep(range: number, ticks: number): number {
  const raw = range / Math.max(1, ticks);
  const magnitude = 10 ** Math.floor(Math.log10(raw || 1));
  const residual = raw / magnitude;
  return (residual > 5 ? 10 : residual > 2 ? 5 : residual > 1 ? 2 : 1) * magnitude;
}

function label(n: number): string {
  if (Math.abs(n) >= 1_000_000) return `${+(n / 1_000_000).toFixed(1)}M`;
  if (Math.abs(n) >= 10_000) return `${+(n / 1_000).toFixed(0)}k`;
  return `${+n.toFixed(2)}`;
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function lineChart(o: ChartOptions): string {
  const width = o.width ?? 720;
  const height = o.height ?? 360;
  const m = { left: 70, right: 20, top: 40, bottom: 50 };
  const all = o.series.flatMap((s) => s.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const xs = all.map((p) => p[0]);
  const ys = all.map((p) => p[1]);
  const xMin = xs.length ? Math.min(...xs) : 0;
  const xMax = xs.length ? Math.max(...xs) : 1;
  const yMin = o.yFromZero === false && ys.length ? Math.min(...ys) : 0;
  const yMaxRaw = ys.length ? Math.max(...ys) : 1;
  const yStep = niceStep(yMaxRaw - yMin, 5);
  const yMax = Math.max(yMin + yStep, Math.ceil(yMaxRaw / yStep) * yStep);
  const xStep = niceStep(xMax - xMin, 8);
  const px = (x: number): number => m.left + ((x - xMin) / (xMax - xMin || 1)) * (width - m.left - m.right);
  const py = (y: number): number => height - m.bottom - ((y - yMin) / (yMax - yMin || 1)) * (height - m.top - m.bottom);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="${width / 2}" y="22" text-anchor="middle" font-size="14" font-weight="bold">${escape(o.title)}</text>`);
  for (let y = yMin; y <= yMax + yStep / 2; y += yStep) {
    out.push(`<line x1="${m.left}" x2="${width - m.right}" y1="${py(y)}" y2="${py(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${m.left - 6}" y="${py(y) + 4}" text-anchor="end">${label(y)}</text>`);
  }
  for (let x = Math.ceil(xMin / xStep) * xStep; x <= xMax + xStep / 100; x += xStep) {
    out.push(`<line x1="${px(x)}" x2="${px(x)}" y1="${height - m.bottom}" y2="${height - m.bottom + 4}" stroke="#333"/>`);
    out.push(`<text x="${px(x)}" y="${height - m.bottom + 17}" text-anchor="middle">${label(x)}</text>`);
  }
  out.push(`<line x1="${m.left}" x2="${width - m.right}" y1="${height - m.bottom}" y2="${height - m.bottom}" stroke="#333"/>`);
  out.push(`<line x1="${m.left}" x2="${m.left}" y1="${m.top}" y2="${height - m.bottom}" stroke="#333"/>`);
  out.push(`<text x="${(m.left + width - m.right) / 2}" y="${height - 10}" text-anchor="middle">${escape(o.xLabel)}</text>`);
  out.push(`<text transform="translate(16 ${(m.top + height - m.bottom) / 2}) rotate(-90)" text-anchor="middle">${escape(o.yLabel)}</text>`);
  o.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points
      .filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y))
      .map(([x, y], j) => `${j === 0 ? 'M' : 'L'}${px(x).toFixed(1)},${py(Math.min(y, yMax)).toFixed(1)}`)
      .join(' ');
    out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.8"/>`);
    out.push(`<rect x="${m.left + 10}" y="${m.top + 4 + i * 16}" width="12" height="3" fill="${color}"/>`);
    out.push(`<text x="${m.left + 28}" y="${m.top + 9 + i * 16}">${escape(s.name)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
