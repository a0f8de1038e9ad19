import { OutboxError } from '../shared/errors.js';

/** Runs functions under a limit; `run` resolves or rejects with the function's outcome. */
export interface Limit {
  run<T>(fn: () => Promise<T> | T): Promise<T>;
}

/** At most `maxConcurrent` calls in flight; the others wait their turn, first come first served. */
export interface ConcurrencyLimit extends Limit {
  readonly maxConcurrent: number;
  /** Calls running now. */
  readonly active: number;
  /** Calls waiting for a slot. */
  readonly waiting: number;
}

/** Create a {@link ConcurrencyLimit}. @throws OutboxError when maxConcurrent is not a positive integer */
export function createConcurrencyLimit(maxConcurrent: number): ConcurrencyLimit {
  positiveInteger('maxConcurrent', maxConcurrent);
  const queue: Array<() => void> = [];
  let active = 0;
  const release = (): void => {
    const next = queue.shift();
    // The slot passes straight to the next waiter, so a new caller cannot jump the queue.
    if (next) next();
    else active--;
  };
  return {
    maxConcurrent,
    get active() {
      return active;
    },
    get waiting() {
      return queue.length;
    },
    async run<T>(fn: () => Promise<T> | T): Promise<T> {
      if (active < maxConcurrent) active++;
      else await new Promise<void>((resolve) => queue.push(resolve));
      try {
        return await fn();
      } finally {
        release();
      }
    },
  };
}

/** Options of {@link createRateLimit}. */
export interface RateLimitOptions {
  /** Calls started per second, on average. */
  perSecond: number;
  /** Calls that may start at once after a quiet period (default 1: evenly spaced). */
  burst?: number;
  /** Clock in milliseconds (default Date.now); for tests. */
  now?: () => number;
  /** Waits this many milliseconds (default setTimeout); for tests. */
  sleep?: (ms: number) => Promise<void>;
}

/** A token bucket: `perSecond` calls per second on average, `burst` at most at once. */
export interface RateLimit extends Limit {
  readonly perSecond: number;
  readonly burst: number;
  /** Wait for a token without running anything. */
  acquire(): Promise<void>;
}

/** Create a {@link RateLimit}. @throws OutboxError when perSecond or burst is not positive */
export function createRateLimit(options: RateLimitOptions): RateLimit {
  const { perSecond } = options;
  if (!(typeof perSecond === 'number' && Number.isFinite(perSecond) && perSecond > 0)) {
    throw new OutboxError(`rate limit: perSecond ${JSON.stringify(perSecond)} is not a positive number`, { retriable: false });
  }
  const burst = options.burst ?? 1;
  positiveInteger('burst', burst);
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  let tokens = burst;
  let last = now();
  const acquire = async (): Promise<void> => {
    const t = now();
    tokens = Math.min(burst, tokens + ((t - last) * perSecond) / 1000);
    last = t;
    // Take the token now even when the bucket is empty (it goes negative): each waiter
    // has reserved its own future token, so waiters are served in arrival order.
    tokens -= 1;
    if (tokens < 0) await sleep(Math.ceil((-tokens * 1000) / perSecond));
  };
  return {
    perSecond,
    burst,
    acquire,
    async run<T>(fn: () => Promise<T> | T): Promise<T> {
      await acquire();
      return fn();
    },
  };
}

/** Options of {@link createDependencyLimit}: its name, and either limit or both. */
export interface DependencyLimitOptions {
  /** The dependency's name, for stats and logs. */
  name: string;
  /** Calls in flight at most (default unlimited). */
  maxConcurrent?: number;
  /** Calls started per second at most (default unlimited). */
  perSecond?: number;
  /** Burst of the rate limit (default 1). */
  burst?: number;
  /** Clock in milliseconds (default Date.now); for tests. */
  now?: () => number;
  /** Waits this many milliseconds (default setTimeout); for tests. */
  sleep?: (ms: number) => Promise<void>;
}

/** A dependency's counters since its limit was created (`DependencyLimit.stats()`). */
export interface DependencyStats {
  name: string;
  /** Calls running now. */
  active: number;
  /** Calls waiting for the limits now. */
  waiting: number;
  /** Calls finished, whether they succeeded or failed. */
  calls: number;
  /** Calls whose function threw or rejected. */
  failures: number;
  /** Total time calls spent waiting for the limits, in milliseconds. */
  waitedMs: number;
  /** Total time calls spent running, in milliseconds. */
  runMs: number;
}

/**
 * One downstream dependency's limits: a concurrency limit and a rate limit in one.
 * Wrap every call to a slow service in `run()`, and share one instance across all
 * partitions of a process, so that consuming more partitions at once does not push more
 * load on the service. The limits are per process: with N consumer processes, give each
 * 1/N of the dependency's budget.
 */
export interface DependencyLimit extends Limit {
  readonly name: string;
  stats(): DependencyStats;
}

/** Create a {@link DependencyLimit}. */
export function createDependencyLimit(options: DependencyLimitOptions): DependencyLimit {
  const now = options.now ?? Date.now;
  const concurrency = options.maxConcurrent === undefined ? undefined : createConcurrencyLimit(options.maxConcurrent);
  const rate =
    options.perSecond === undefined
      ? undefined
      : createRateLimit({ perSecond: options.perSecond, burst: options.burst, now, sleep: options.sleep });
  const totals = { calls: 0, failures: 0, waitedMs: 0, runMs: 0, active: 0, waiting: 0 };
  const timed = async <T>(fn: () => Promise<T> | T, queuedAt: number): Promise<T> => {
    if (rate) await rate.acquire();
    const started = now();
    totals.waiting--;
    totals.active++;
    totals.waitedMs += started - queuedAt;
    try {
      return await fn();
    } catch (error) {
      totals.failures++;
      throw error;
    } finally {
      totals.active--;
      totals.calls++;
      totals.runMs += now() - started;
    }
  };
  return {
    name: options.name,
    stats: () => ({ name: options.name, ...totals }),
    run<T>(fn: () => Promise<T> | T): Promise<T> {
      const queuedAt = now();
      totals.waiting++;
      // Slot first, then token: a call waiting for a token holds a slot, so the number of
      // calls in flight or about to start never exceeds maxConcurrent.
      return concurrency ? concurrency.run(() => timed(fn, queuedAt)) : timed(fn, queuedAt);
    },
  };
}

function positiveInteger(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new OutboxError(`limit: ${name} ${JSON.stringify(value)} is not a positive whole number`, { retriable: false });
  }
}
