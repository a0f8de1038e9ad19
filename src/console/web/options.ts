import { ConfigError } from '../../shared/errors.js';
import { checkedText, type Setting } from '../../shared/settings.js';
import { parseMetricsAddress } from '../../metrics/options.js';
import { parseUsers } from './users.js';

// Settings of `outbox-relay console`: where it listens, under which path, for which
// public origin, and who may log in (a secret: environment or file only).

/** Port of the console unless told otherwise: next to the metrics server's 9464. */
export const CONSOLE_DEFAULT_PORT = 9465;

/** `--listen`: host:port of the console. */
export const consoleListen: Setting<string> = checkedText({
  option: 'listen',
  flag: '--listen',
  env: 'OUTBOX_CONSOLE_LISTEN',
  description: 'Address the console listens on, host:port. Loopback by default: put a reverse proxy (TLS) in front to reach it from elsewhere.',
  defaultValue: `127.0.0.1:${CONSOLE_DEFAULT_PORT}`,
  check: (v) => listenProblem(v),
});

/** What is wrong with a listen address, or undefined. */
function listenProblem(value: string): string | undefined {
  const parsed = parseMetricsAddress(value);
  if ('problem' in parsed || parsed.value === 'off') return `${JSON.stringify(value)} is not host:port (for example 127.0.0.1:${CONSOLE_DEFAULT_PORT})`;
  return undefined;
}

/** host and port of a listen address that {@link consoleListen} accepted. */
export function parseListen(value: string): { host: string; port: number } {
  const parsed = parseMetricsAddress(value);
  if ('problem' in parsed || parsed.value === 'off') throw new ConfigError('listen', `${JSON.stringify(value)} is not host:port`);
  return parsed.value;
}

const PREFIX = /^(\/[A-Za-z0-9._~-]+)+$/;

/** What is wrong with a path prefix ('' for none), or undefined. */
export function pathPrefixProblem(value: string): string | undefined {
  if (value === '') return undefined;
  if (!PREFIX.test(value) || value.split('/').some((s) => s === '.' || s === '..')) {
    return `${JSON.stringify(value)} is not a path prefix (/ then letters, digits, . _ ~ -, segments separated by /; for example /outbox)`;
  }
  return undefined;
}

/** `--path-prefix`: the path the console is served under, behind a reverse proxy. */
export const consolePathPrefix: Setting<string> = checkedText({
  option: 'pathPrefix',
  flag: '--path-prefix',
  env: 'OUTBOX_CONSOLE_PATH_PREFIX',
  description: 'Path the console is served under behind a reverse proxy that forwards it unchanged (/outbox); every link and form carries it. Empty: served at /.',
  defaultValue: '',
  normalize: (v) => (v === '/' ? '' : v.replace(/\/+$/, '')),
  check: pathPrefixProblem,
});

/** What is wrong with a public origin ('' for none), or undefined. */
export function publicOriginProblem(value: string): string | undefined {
  if (value === '') return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `${JSON.stringify(value)} is not an origin (https://ops.example.com)`;
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || url.origin !== value || url.username || url.password) {
    return `${JSON.stringify(value)} is not an origin: scheme, host and port only, no path (https://ops.example.com)`;
  }
  return undefined;
}

/** `--public-origin`: the origin browsers reach the console at, behind a proxy. */
export const consolePublicOrigin: Setting<string> = checkedText({
  option: 'publicOrigin',
  flag: '--public-origin',
  env: 'OUTBOX_CONSOLE_PUBLIC_ORIGIN',
  description:
    'Origin browsers reach the console at behind a proxy (https://ops.example.com): a POST whose Origin header names another is refused, and with https the session cookie is Secure. Empty: an Origin must name the Host (or X-Forwarded-Host) the request was sent to.',
  defaultValue: '',
  normalize: (v) => v.replace(/\/+$/, ''),
  check: publicOriginProblem,
});

const MAX_USERS_TEXT = 256 * 1024;

/** OUTBOX_CONSOLE_USERS (or OUTBOX_CONSOLE_USERS_FILE): `name:role:password` a line. A secret: never a flag. */
export const consoleUsers: Setting<string> = {
  option: 'users',
  flag: undefined,
  env: 'OUTBOX_CONSOLE_USERS',
  description:
    'Who may log in, one `name:role:password` a line (role viewer or operator; password a hash printed by `outbox-relay console-user`, or plain text). A secret: OUTBOX_CONSOLE_USERS or OUTBOX_CONSOLE_USERS_FILE, never a flag.',
  defaultValue: undefined,
  secret: true,
  parse(raw) {
    const problem = this.check(raw);
    return problem ? { problem } : { value: raw };
  },
  check(value) {
    if (typeof value !== 'string') return 'is not text';
    if (value.length > MAX_USERS_TEXT) return `is longer than ${MAX_USERS_TEXT} characters`;
    try {
      parseUsers(value, 'users');
      return undefined;
    } catch (error) {
      // "users, line 3: ..." without the setting's own name, which the caller adds.
      return error instanceof ConfigError ? error.message.replace(/^users,? ?/, '') : 'cannot be read';
    }
  },
};

/** The console's own settings, in the order help and docs list them. */
export const CONSOLE_SETTINGS = [consoleListen, consolePathPrefix, consolePublicOrigin, consoleUsers] as const;
