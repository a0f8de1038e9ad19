/**
 * The prewarmer: a prewarm pass (prewarm.ts) over a cache's hot keys every `intervalMs`,
 * so that they are loaded ahead of their expiry instead of by the reader that finds them
 * gone. Passes never overlap: the interval runs from the end of one to the start of the
 * next. Since a key is looked at once per interval, it must be refreshed within a window
 * longer than that (`refreshAheadMs` > `intervalMs`, checked up front).
 *
 * Stopping is bounded: stop() aborts the signal the keys function and the pass's loaders
 * get, and waits for nothing else than the pass's Redis commands in flight (each bounded
 * by `redisTimeoutMs`), whether or not the loaders heed their signal.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError } from '../shared/errors.js';
import { TypedEmitter } from '../shared/events.js';
import { cacheInternals, type Cache, type CacheInternals } from './cache.js';
import type { PrewarmResult } from './prewarm.js';
import { checkKeys, resolvePrewarmerOptions, type PrewarmerOptions, type PrewarmKeys, type ResolvedPrewarmerOptions } from './prewarmOptions.js';

/** What a {@link Prewarmer} tells its listeners. */
export interface PrewarmerEvents {
  /** A pass ended, with what it did per key (a pass cut short by stop() too: its `stoppedBy` is `'signal'`). */
  pass: PrewarmResult;
  /**
   * A pass could not start: the keys function threw, or returned something else than a
   * list of non-empty strings (a ConfigError naming `prewarmer.keys`). The next pass
   * comes after `intervalMs`.
   */
  passFailed: { error: unknown };
}

/**
 * Keeps a cache's hot keys warm: a prewarm pass every `intervalMs` once started. Made by
 * {@link createPrewarmer}. `start()` and `stop()` may be called any number of times.
 */
export class Prewarmer extends TypedEmitter<PrewarmerEvents> {
  private controller: AbortController | undefined;
  private loop: Promise<void> = Promise.resolve();

  /** @internal made by createPrewarmer */
  constructor(
    private readonly internals: CacheInternals,
    private readonly o: ResolvedPrewarmerOptions,
  ) {
    super();
  }

  /** True between start() and stop(). */
  get running(): boolean {
    return this.controller !== undefined;
  }

  /** Starts the passes: the first one now. No-op while running; after stop(), starts again once the old passes are done. */
  start(): void {
    if (this.controller) return;
    const controller = new AbortController();
    this.controller = controller;
    this.loop = this.loop.then(() => this.run(controller.signal));
  }

  /**
   * Stops: no pass starts any more, and the one running is cut short (its loaders'
   * signals aborted, its remaining keys left). Resolves once it has ended, within about
   * one `redisTimeoutMs` whatever the loaders and the keys function do. Idempotent.
   */
  async stop(): Promise<void> {
    this.controller?.abort(new Error('prewarmer stopped'));
    this.controller = undefined;
    await this.loop;
  }

  private async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await this.pass(signal);
      try {
        await sleep(this.o.intervalMs, undefined, { signal });
      } catch {
        return; // stopped while waiting
      }
    }
  }

  private async pass(signal: AbortSignal): Promise<void> {
    let keys: readonly string[];
    try {
      keys = typeof this.o.keys === 'function' ? checkKeys(await untilAborted(this.o.keys, signal), 'prewarmer.keys') : this.o.keys;
    } catch (error) {
      if (signal.aborted) return;
      this.internals.recordKeysError();
      this.emit('passFailed', { error });
      return;
    }
    let result: PrewarmResult;
    try {
      result = await this.internals.prewarm(keys, this.o.loader, { ...this.o.pass, signal });
    } catch (error) {
      // A pass settles every key itself; this is for what it did not foresee.
      this.emit('passFailed', { error });
      return;
    }
    this.emit('pass', result);
  }
}

/** The keys function's list, or the signal's reason as soon as it aborts, whether or not the function heeds it. */
function untilAborted(keys: Extract<PrewarmKeys, Function>, signal: AbortSignal): Promise<readonly string[]> {
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    Promise.resolve()
      .then(() => keys({ signal }))
      .then(resolve, reject)
      .finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * Makes a {@link Prewarmer} for `cache` (made by createCache): not started; call
 * `start()`, and `stop()` before closing the Redis client. Every option is validated now
 * (a ConfigError naming it); `keys` given as a function is checked at each pass.
 */
export function createPrewarmer<T>(cache: Cache, options: PrewarmerOptions<T>): Prewarmer {
  const internals = cacheInternals.get(cache);
  if (!internals) throw new ConfigError('prewarmer.cache', 'must be a cache made by createCache');
  return new Prewarmer(internals, resolvePrewarmerOptions(options, internals.defaults));
}
