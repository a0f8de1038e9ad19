import type pg from 'pg';
import { OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { Session } from './session.js';

// A handler (or batch handler) that never settles would hold its partition, and its
// transaction's row locks (the claimed idempotency keys among them), until stop(). After
// `handlerTimeoutMs` the runtime gives the call up: the connection is destroyed and the
// server process holding the transaction ended, so its locks go at once, even when the
// handler left a statement running (pg_sleep, a lock wait) that would keep the server
// from noticing the closed socket. The message then fails like any retriable handler
// error. The call itself cannot be cancelled; its ctx.client is closed (clientGuard.ts).

/** A handler or batch handler call still running after `handlerTimeoutMs`: given up on. */
export class HandlerTimeout extends OutboxError {
  constructor(timeoutMs: number, firstOffset: string, lastOffset: string) {
    const which = firstOffset === lastOffset ? `offset ${firstOffset}` : `offsets ${firstOffset}-${lastOffset}`;
    super(
      `handler of ${which} still running after ${timeoutMs} ms (handlerTimeoutMs); given up on: its transaction is rolled back (connection destroyed, ` +
        'server process ended) and the message fails as a retriable error: retried with backoff, then dead-lettered, as classifyError decides',
      { retriable: true, context: { handlerTimeoutMs: timeoutMs, firstOffset, lastOffset } },
    );
  }
}

/** `work`, or a rejection with HandlerTimeout after `timeoutMs`. A later rejection of `work` is handled. */
export async function withinHandlerTimeout<T>(work: Promise<T>, timeoutMs: number, firstOffset: string, lastOffset: string): Promise<T> {
  work.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new HandlerTimeout(timeoutMs, firstOffset, lastOffset)), timeoutMs);
    // A hard stop abandons the call without settling it (the callers race this against the
    // stop), and the finally below then waits for the timer: unref'd, it cannot keep a
    // stopped consumer's process alive for handlerTimeoutMs. A running consumer's Kafka
    // connections keep the process alive, so it still fires there.
    timer.unref();
  });
  try {
    return await Promise.race([work, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/** Ends the server process of a given-up transaction (a no-op when it is already gone). */
const TERMINATE_SQL = 'SELECT pg_terminate_backend($1) AS ended';

/**
 * Give up the transaction of a timed-out handler: destroy its connection (never back to
 * the pool while the handler may still use it) and end its server process, whose locks
 * would otherwise outlive it while a statement of the handler runs. Ending it needs the
 * same role as the consumer's (or pg_signal_backend); when refused, logged and left to
 * the server.
 */
export async function abandonSession(pool: pg.Pool, session: Session, error: HandlerTimeout, logger: Logger): Promise<void> {
  session.release(error);
  if (session.backendPid === undefined) return;
  try {
    await pool.query(TERMINATE_SQL, [session.backendPid]);
  } catch (terminateError) {
    logger.warn({ backendPid: session.backendPid, err: describeError(terminateError) }, 'handler timed out: could not end its server process; its locks stay until the server notices the closed connection');
  }
}
