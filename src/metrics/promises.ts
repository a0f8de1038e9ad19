/** Promise helpers of the samplers and probes. */

import { OutboxError } from '../shared/errors.js';

/**
 * A probe that did not answer in time. Its own class, so a readiness check that gave up
 * says `deadline_error` (errorLabel.ts) rather than `other`: an operator reading /readyz
 * can tell a server that hangs from one that refuses.
 */
export class DeadlineError extends OutboxError {
  constructor(what: string, ms: number) {
    super(`${what} timed out after ${ms} ms`, { retriable: true, context: { what, timeoutMs: ms } });
  }
}

/**
 * One run of `fn` at a time, so a slow server never piles them up. A call while a run is
 * in flight gets the next run, which starts after it: its result is never older than the
 * call. Concurrent callers share that next run.
 */
export function serialized<T>(fn: () => Promise<T>): (() => Promise<T>) & { idle(): Promise<void> } {
  let running: Promise<T> | undefined;
  let queued: Promise<T> | undefined;
  const start = (): Promise<T> => {
    const run = fn().finally(() => {
      if (running === run) running = undefined;
    });
    running = run;
    return run;
  };
  const call = (): Promise<T> => {
    if (!running) return start();
    queued ??= running
      .catch(() => undefined)
      .then(() => {
        queued = undefined;
        return start();
      });
    return queued;
  };
  return Object.assign(call, {
    async idle() {
      await queued?.catch(() => undefined);
      await running?.catch(() => undefined);
    },
  });
}

/**
 * `promise`, or a rejection with a DeadlineError ("`what` timed out after `ms` ms") if it has not settled by
 * then. The promise itself is not cancelled: it settles later, unobserved.
 */
export async function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineError(what, ms)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
