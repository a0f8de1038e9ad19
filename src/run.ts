import { createRelay, type RelayOptions } from './relay.js';
import type { Logger } from './logger.js';

/** Process exit codes of `outbox-relay` commands. */
export const EXIT = {
  /** Finished, or stopped cleanly after a signal. */
  ok: 0,
  /** A runtime failure: a server unreachable at start, schema missing, a bug. */
  failure: 1,
  /** Invalid settings or usage; nothing was touched. */
  usage: 2,
  /** Stopped hard: a second signal, or the shutdown timeout, cut in-flight batches short (they are published again later). */
  forced: 3,
} as const;

export interface RunRelayOptions extends RelayOptions {
  logger: Logger;
  /** Install SIGTERM/SIGINT handlers (default true): first soft stop, second hard stop. */
  handleSignals?: boolean;
  /** Resolves the returned promise's stop early when aborted (for embedding and tests). */
  signal?: AbortSignal;
}

/**
 * `outbox-relay run`: start a relay and keep it running until SIGTERM or SIGINT.
 *
 * The first signal stops claiming and lets the batches in flight finish; a second one,
 * or the shutdown timeout, abandons them (their rows are published again later).
 *
 * @returns the exit code: {@link EXIT}.ok after a soft stop, EXIT.forced after a hard one
 */
export async function runRelay(options: RunRelayOptions): Promise<number> {
  const relay = createRelay(options);
  await relay.start();
  const logger = options.logger;
  let signals = 0;
  const onSignal = (name: NodeJS.Signals): void => {
    signals++;
    if (signals === 1) {
      logger.info({ signal: name }, 'stopping: finishing batches in flight (send the signal again to stop now)');
      void relay.stop();
    } else {
      logger.warn({ signal: name }, 'second signal: stopping now');
      void relay.abort();
    }
  };
  if (options.handleSignals ?? true) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }
  options.signal?.addEventListener('abort', () => void relay.stop(), { once: true });
  try {
    const stopped = await new Promise<{ hard: boolean }>((resolve) => relay.once('stopped', resolve));
    return stopped.hard ? EXIT.forced : EXIT.ok;
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}
