import { createRequire } from 'node:module';
import { ConfigError } from '../shared/errors.js';

// Whether the dependency behind `producer: 'platformatic'` is installed (an install that
// left it out, say with --omit): a module of its own so that the options check it without
// importing the adapter.

/** The npm package behind `producer: 'platformatic'` (a dependency). */
export const PLATFORMATIC_PACKAGE = '@platformatic/kafka';

/** The error of a missing package, naming the setting and the fix. */
export function missingPackage(cause?: unknown): ConfigError {
  const error = new ConfigError(
    'producer',
    `is platformatic, but the package ${PLATFORMATIC_PACKAGE} is not installed: \`npm install ${PLATFORMATIC_PACKAGE}@^2.12.1\`, or publish through kafkajs instead (--producer kafkajs / OUTBOX_PRODUCER=kafkajs)`,
  );
  if (cause !== undefined) Object.defineProperty(error, 'cause', { value: cause });
  return error;
}

/**
 * Fail at configuration time, not at the first batch, when the package is missing: the
 * adapter imports it lazily, so an install without it fails here, naming the fix.
 *
 * @throws ConfigError naming the setting (`producer`) and the package
 */
export function assertPlatformaticInstalled(resolve: (specifier: string) => string = createRequire(import.meta.url).resolve): void {
  try {
    resolve(PLATFORMATIC_PACKAGE);
  } catch (error) {
    throw missingPackage(error);
  }
}
