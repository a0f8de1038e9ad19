import { OutboxError, describeError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { CommittedHook } from './outcome.js';
import type { EmitConsumerEvent } from './report.js';
import type { StopSignal } from './stopSignal.js';
import type { ConsumerStats } from './types.js';

/** An afterCommit hook still running after `afterCommitTimeoutMs`: given up on. */
export class AfterCommitTimeout extends OutboxError {
  constructor(timeoutMs: number, offset: string) {
    super(`afterCommit hook of offset ${offset} still running after ${timeoutMs} ms (afterCommitTimeoutMs); given up on, the partition goes on and the offset is committed`, {
      retriable: false,
      context: { afterCommitTimeoutMs: timeoutMs, offset },
    });
  }
}

/**
 * Run the afterCommit hooks of committed messages, one after another in offset order,
 * each for at most `timeoutMs`. A hook's failure or timeout is logged, counted and
 * reported; it changes nothing else (the commit stands, the offset is committed next). A
 * hard stop ends the wait at once and skips the hooks not started.
 */
export async function runAfterCommitHooks(
  hooks: CommittedHook[],
  where: { topic: string; partition: number },
  o: { timeoutMs: number; stop: StopSignal; logger: Logger; counters: ConsumerStats; emit: EmitConsumerEvent },
): Promise<void> {
  const { topic, partition } = where;
  for (const hook of hooks) {
    if (o.stop.stopped) {
      o.logger.warn({ topic, partition, offset: hook.offset }, 'consumer stopped: afterCommit hook not run');
      continue;
    }
    let timer: NodeJS.Timeout | undefined;
    try {
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new AfterCommitTimeout(o.timeoutMs, hook.offset)), o.timeoutMs);
      });
      await o.stop.race(Promise.race([Promise.resolve().then(hook.fn), timedOut]), 'an afterCommit hook');
    } catch (error) {
      if (o.stop.stopped && !(error instanceof AfterCommitTimeout)) {
        o.logger.warn({ topic, partition, offset: hook.offset }, 'consumer stopped while an afterCommit hook ran; no longer waited for');
        continue;
      }
      o.counters.afterCommitErrors++;
      o.logger.error({ topic, partition, offset: hook.offset, idempotencyKey: hook.idempotencyKey, err: describeError(error) }, error instanceof AfterCommitTimeout ? 'afterCommit hook timed out; its transaction stays committed' : 'afterCommit hook failed; its transaction stays committed');
      o.emit('afterCommitError', { topic, partition, offset: hook.offset, idempotencyKey: hook.idempotencyKey, error });
    } finally {
      clearTimeout(timer);
    }
  }
}
