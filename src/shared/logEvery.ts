/**
 * One log line per condition per interval. A condition that holds for minutes (a horizon
 * held behind an open transaction) otherwise logs at the rate of whatever notices it: the
 * horizon probe noticed a held horizon about 80 times a second. The line that goes out
 * says how many it stands for.
 */
export class LogEvery {
  private readonly last = new Map<string, { atMs: number; held: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The condition `key` was noticed. Returns how many times it was noticed without a line
   * since the last one went out (0 for the first) when a line is due now, or undefined when
   * it is not (counted for the next line).
   */
  take(key: string): number | undefined {
    const now = this.now();
    const last = this.last.get(key);
    if (last && now - last.atMs < this.intervalMs) {
      last.held++;
      return undefined;
    }
    this.last.set(key, { atMs: now, held: 0 });
    return last?.held ?? 0;
  }
}
