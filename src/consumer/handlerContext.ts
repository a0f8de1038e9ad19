import type pg from 'pg';
import type { ClientGuard } from './clientGuard.js';
import { advanceEntityVersion } from './versionGate.js';
import { lockEntity } from './entityLock.js';
import type { MessageOutcome } from './outcome.js';
import type { ResolvedConsumerOptions } from './options.js';
import type { BatchContext, ConsumedMessage, HandlerContext } from './types.js';

// What a handler gets besides its message(s): the open transaction (through the guarded
// client) and the helpers bound to it. `client` is the consumer's own connection, for
// the helpers' statements; `guard.client` the guarded one handed to the handler. Once the
// handler's run is over (guard.close()) the helpers refuse to run, as the client does: on
// the raw connection they would run after the COMMIT, on a pooled connection.

/**
 * The handler's context. `outcome` collects what the handler reported (stale, afterCommit
 * hooks); the hooks run only when this outcome is the one that committed.
 */
export function handlerContext<V>(options: ResolvedConsumerOptions<V>, client: pg.PoolClient, attempt: number, outcome: MessageOutcome, guard: ClientGuard): HandlerContext {
  const { groupId, schema } = options;
  const markStale = (): void => {
    outcome.stale = true;
  };
  return {
    client: guard.client,
    attempt,
    groupId,
    markStale,
    advanceVersion: async (entity, version, o) => {
      guard.assertOpen('ctx.advanceVersion()');
      const newer = await advanceEntityVersion(client, { schema, scope: o?.scope ?? groupId, entity, version });
      if (!newer) markStale();
      return newer;
    },
    lockEntity: async (key, o) => {
      guard.assertOpen('ctx.lockEntity()');
      return lockEntity(client, key, o);
    },
    afterCommit: (fn) => {
      if (typeof fn !== 'function') throw new TypeError('afterCommit(fn): fn must be a function');
      if (outcome.settled) throw new Error('afterCommit called after the handler returned: register hooks while the handler runs');
      outcome.hooks.push(fn);
    },
  };
}

/**
 * The batch handler's context. `outcomes[i]` is `messages[i]`'s (markStale sets it);
 * the hooks go to `hookOutcome`, which decides when registering is over (`settled`).
 */
export function batchContext<V>(
  options: ResolvedConsumerOptions<V>,
  client: pg.PoolClient,
  attempt: number,
  messages: ReadonlyArray<ConsumedMessage<V>>,
  outcomes: MessageOutcome[],
  hookOutcome: MessageOutcome,
  guard: ClientGuard,
): BatchContext<V> {
  const { groupId, schema } = options;
  return {
    client: guard.client,
    attempt,
    groupId,
    advanceVersion: async (entity, version, o) => {
      guard.assertOpen('ctx.advanceVersion()');
      return advanceEntityVersion(client, { schema, scope: o?.scope ?? groupId, entity, version });
    },
    markStale: (message) => {
      const index = messages.indexOf(message);
      if (index < 0) throw new TypeError('markStale(message): not one of this batch\'s messages (pass the object the batch handler got)');
      (outcomes[index] as MessageOutcome).stale = true;
    },
    lockEntity: async (key, o) => {
      guard.assertOpen('ctx.lockEntity()');
      return lockEntity(client, key, o);
    },
    afterCommit: (fn) => {
      if (typeof fn !== 'function') throw new TypeError('afterCommit(fn): fn must be a function');
      if (hookOutcome.settled) throw new Error('afterCommit called after the batch handler returned: register hooks while it runs');
      hookOutcome.hooks.push(fn);
    },
  };
}
