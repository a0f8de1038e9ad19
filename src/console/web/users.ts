import { ConfigError } from '../../shared/errors.js';
import { parseStoredPassword, type StoredPassword } from './passwords.js';

// Who may use the console: one user a line, `name:role:password`, from OUTBOX_CONSOLE_USERS
// or the file OUTBOX_CONSOLE_USERS_FILE names (never a flag). The password is a scrypt
// hash printed by `outbox-relay console-user`, or plain text (8 characters or more).
// Blank lines and lines starting with # are skipped. No message here quotes a line: it
// holds a password.

/** What a user may do: a viewer reads; an operator also replays, discards and unparks. */
export type ConsoleRole = 'viewer' | 'operator';

export const CONSOLE_ROLES: readonly ConsoleRole[] = ['viewer', 'operator'];

/** One user of the console. */
export interface ConsoleUser {
  name: string;
  role: ConsoleRole;
  password: StoredPassword;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
const MAX_USERS = 1_000;

/** What is wrong with a user name, or undefined. */
export function userNameProblem(name: string): string | undefined {
  return NAME.test(name) ? undefined : `${JSON.stringify(name)} is not a user name (1-64 letters, digits, . _ @ -, starting with a letter or digit)`;
}

/** What is wrong with a role, or undefined. */
export function roleProblem(role: string): string | undefined {
  return (CONSOLE_ROLES as readonly string[]).includes(role) ? undefined : `${JSON.stringify(role)} is not a role (viewer or operator)`;
}

/**
 * Parse the users text: `name:role:password` a line.
 *
 * @param setting names the source in errors (OUTBOX_CONSOLE_USERS_FILE)
 * @throws ConfigError naming the line, never quoting it
 */
export function parseUsers(text: string, setting = 'users'): ConsoleUser[] {
  const users: ConsoleUser[] = [];
  const names = new Set<string>();
  const lines = text.split(/\r?\n/);
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `${setting}, line ${i + 1}`;
    const first = line.indexOf(':');
    const second = first < 0 ? -1 : line.indexOf(':', first + 1);
    if (second < 0) throw new ConfigError(where, 'is not name:role:password (the line is not shown)');
    const name = line.slice(0, first);
    const role = line.slice(first + 1, second);
    const nameProblem = userNameProblem(name);
    if (nameProblem) throw new ConfigError(where, 'does not start with a user name (1-64 letters, digits, . _ @ -; the line is not shown)');
    const problem = roleProblem(role);
    if (problem) throw new ConfigError(where, `user ${name}: ${problem}`);
    if (names.has(name)) throw new ConfigError(where, `user ${name} is listed twice`);
    names.add(name);
    const password = parseStoredPassword(line.slice(second + 1));
    if ('problem' in password) throw new ConfigError(where, `user ${name} ${password.problem}`);
    users.push({ name, role: role as ConsoleRole, password });
  });
  if (users.length === 0) {
    throw new ConfigError(setting, 'lists no user: the console requires a login (name:role:password a line; see docs/console.md)');
  }
  if (users.length > MAX_USERS) throw new ConfigError(setting, `lists ${users.length} users; at most ${MAX_USERS}`);
  return users;
}
