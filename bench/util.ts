/** Small helpers of the benchmarks: time, waiting, statistics, number formatting, progress log. */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Wall-clock milliseconds with sub-millisecond precision, comparable across processes. */
export const wall = (): number => performance.timeOrigin + performance.now();

export const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** A number for the table; `n/a` for NaN and infinities (the run's self-check refuses those). */
export const fmt = (n: number, digits = 0): string =>
  Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a';

/** Progress on stderr (stdout carries the table). */
export function log(text: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${text}\n`);
}

export async function until(what: string, check: () => Promise<boolean> | boolean, timeoutMs: number, everyMs = 100): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

export function percentiles(sorted: number[]): Percentiles {
  return { p50: percentile(sorted, 50), p95: percentile(sorted, 95), p99: percentile(sorted, 99), max: sorted[sorted.length - 1] ?? NaN };
}

/** Points (percentile, value) from 0 to 99.9 for a percentile plot. */
export function percentileSeries(sorted: number[]): Array<[number, number]> {
  const points: Array<[number, number]> = [];
  for (let p = 0; p <= 99.9; p += p < 90 ? 1 : 0.1) points.push([p, percentile(sorted, p)]);
  return points;
}

/** The median of `xs` (the mean of the middle two for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The median of each numeric figure (nested objects too) across rounds; other values from the first. */
export function medianOf<T>(xs: T[]): T {
  const first = xs[0] as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(first)) {
    if (typeof v === 'number') out[k] = median(xs.map((x) => (x as Record<string, number>)[k]!));
    else if (v && typeof v === 'object') out[k] = medianOf(xs.map((x) => (x as Record<string, unknown>)[k]));
    else out[k] = v;
  }
  return out as T;
}
