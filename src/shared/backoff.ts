/**
 * Exponential backoff with full jitter: a uniformly random delay between 0 and
 * min(maxMs, baseMs * 2^attempt). Full jitter spreads retries of many relays or
 * partitions that failed together, so they do not come back as one wave.
 *
 * @param attempt 0 for the first retry
 */
export function backoffDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}
