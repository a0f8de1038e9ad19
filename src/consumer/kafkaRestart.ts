import { backoffDelayMs } from '../shared/backoff.js';

/**
 * Starts the Kafka consumer again after kafkajs gave up on it.
 *
 * kafkajs restarts its consumer by itself only after an error it deems retriable. After
 * any other (KafkaJSGroupCoordinatorNotFound, when a broker restart outlasts its
 * coordinator lookup) it disconnects and stays down: the process lives on and consumes
 * nothing. This waits out the retry backoff for the number of consecutive give-ups, then
 * calls `start`; a start that fails is reported by kafkajs as another crash (or rejects),
 * which schedules the next attempt.
 */
export class KafkaRestart {
  /** Consecutive give-ups since the group last assigned partitions. */
  private attempts = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly o: {
      retryBaseDelayMs: number;
      retryMaxDelayMs: number;
      /** Whether the consumer is stopping: then nothing is started again. */
      stopping: () => boolean;
      /** Announce the coming attempt (log, event). */
      announce: (error: unknown, attempt: number, delayMs: number) => void;
      start: () => Promise<void>;
      /** A start that rejected (it is scheduled again). */
      failed: (error: unknown) => void;
    },
  ) {}

  /** kafkajs gave up after `error`: start again after the backoff (once, however often called meanwhile). */
  schedule(error: unknown): void {
    if (this.o.stopping() || this.timer) return;
    const attempt = ++this.attempts;
    const delayMs = backoffDelayMs(attempt - 1, this.o.retryBaseDelayMs, this.o.retryMaxDelayMs);
    this.o.announce(error, attempt, delayMs);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.o.stopping()) return;
      this.o.start().catch((startError: unknown) => {
        this.o.failed(startError);
        this.schedule(startError);
      });
    }, delayMs);
  }

  /** The group assigned partitions: the consumer runs again. */
  reset(): void {
    this.attempts = 0;
  }

  /** Stopping: no attempt is made any more. */
  cancel(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
