/**
 * Wakes waiters when something changed (new rows became claimable, a stop began).
 * A waiter also wakes after its timeout, so a missed notification costs one interval,
 * never a hang.
 */
export class WakeUp {
  private waiters = new Set<() => void>();

  /** Resolves on the next notify() or after timeoutMs, whichever comes first. */
  wait(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.waiters.add(done);
    });
  }

  notify(): void {
    for (const wake of [...this.waiters]) wake();
  }
}
