import { ConfigError } from '../../shared/errors.js';
import type { CappedCount } from '../model.js';

/** A count taken over at most `cap + 1` rows, as a {@link CappedCount}. */
export function capped(counted: number, cap: number): CappedCount {
  return counted > cap ? { count: cap, capped: true } : { count: counted, capped: false };
}

/** Check a cap or a page size given by a caller: a whole number from 1 to `max`. */
export function checkCount(name: string, value: number, max: number): number {
  if (!Number.isSafeInteger(value) || value < 1 || value > max) throw new ConfigError(name, `${JSON.stringify(value)} is not a whole number from 1 to ${max}`);
  return value;
}
