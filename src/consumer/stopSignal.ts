import { OutboxError } from '../shared/errors.js';

/** What a hard stop makes a handler or hook still running fail with, so its batch ends. */
class ConsumerStopped extends OutboxError {
  constructor(what: string) {
    super(`consumer stopped (shutdownTimeoutMs ran out) while ${what} was still running; its transaction is rolled back and its messages come again`, { retriable: true, context: { what } });
  }
}

/**
 * Fired once by a hard stop (shutdownTimeoutMs ran out). Work the consumer waits for and
 * cannot cancel (a handler waiting on something other than Postgres, an afterCommit hook)
 * is raced against it, so the partition's batch ends and stop() stays bounded.
 */
export class StopSignal {
  private fire!: () => void;
  private readonly fired = new Promise<void>((resolve) => {
    this.fire = resolve;
  });
  stopped = false;

  abort(): void {
    this.stopped = true;
    this.fire();
  }

  /**
   * `work`, or a rejection with ConsumerStopped when the stop comes first. `work` keeps
   * running; a rejection it ends with later is handled (not an unhandled rejection).
   */
  race<T>(work: Promise<T> | T, what: string): Promise<T> {
    const running = Promise.resolve(work);
    running.catch(() => undefined);
    return Promise.race([running, this.fired.then(() => Promise.reject(new ConsumerStopped(what)))]);
  }
}
