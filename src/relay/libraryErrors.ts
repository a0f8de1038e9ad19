import { describeError } from '../shared/errors.js';
import type { ClientLibrary, LibraryGuardOwner } from '../shared/libraryGuard.js';
import type { Logger } from '../shared/logger.js';
import type { RelayEvents } from './relayEvents.js';

/**
 * What a relay does when a client library threw from one of its own callbacks
 * (../shared/libraryGuard.ts): one log line with the library's stack (the calls it
 * failed log their own retry lines), and the `libraryError` event the metrics count.
 */
export function relayLibraryGuardOwner(logger: Logger, emit: (payload: RelayEvents['libraryError']) => void): LibraryGuardOwner {
  return {
    contained(library: ClientLibrary, error: unknown, calls: number): void {
      const stack = error instanceof Error ? error.stack : undefined;
      logger.error(
        { library, failedCalls: calls, err: describeError(error), stack },
        'a client library threw from its own callback (a library bug); contained: the calls in flight into it fail as transient and are retried, the relay goes on',
      );
      emit({ library, error: error instanceof Error ? error : new Error(String(error)), failedCalls: calls });
    },
  };
}
