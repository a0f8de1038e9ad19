/** Closed: claiming. Open: the broker looks unreachable; nothing is claimed until a probe succeeds. */
export type BreakerState = 'closed' | 'open';

/**
 * A circuit breaker in front of Kafka. After `failuresToOpen` consecutive transient
 * publish failures it opens: workers stop claiming (no attempts burned, no transaction
 * held open, no log line per retry) and a probe checks the broker with backoff. When the
 * probe succeeds it closes again, one failure short of opening, so that a broker still
 * sick reopens it at the first failed batch.
 */
export class CircuitBreaker {
  state: BreakerState = 'closed';
  private consecutiveFailures = 0;
  /** When the breaker last opened (ms since epoch), or undefined. */
  openedAtMs: number | undefined;

  constructor(private readonly failuresToOpen: number) {}

  /** @returns true when this failure opened the breaker */
  failure(now = Date.now()): boolean {
    this.consecutiveFailures++;
    if (this.state === 'closed' && this.consecutiveFailures >= this.failuresToOpen) {
      this.state = 'open';
      this.openedAtMs = now;
      return true;
    }
    return false;
  }

  success(): void {
    this.consecutiveFailures = 0;
  }

  /** A probe reached the broker: close, one failure short of opening again. */
  probeSucceeded(): void {
    this.state = 'closed';
    this.openedAtMs = undefined;
    this.consecutiveFailures = Math.max(0, this.failuresToOpen - 1);
  }

  get isOpen(): boolean {
    return this.state === 'open';
  }
}
