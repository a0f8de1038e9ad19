import pg from 'pg';
import { ConfigError } from '../shared/errors.js';
import { silentLogger, type Logger } from '../shared/logger.js';
import { optionValue } from '../shared/settings.js';
import { schema as schemaSetting, databaseUrl as databaseUrlSetting } from '../shared/commonSettings.js';
import { guardPoolClients } from '../shared/database.js';
import { checkOutboxList, type OutboxDefinition } from '../shared/outboxList.js';
import { replayRate } from '../commands/options.js';
import { CONSOLE_DEFAULT_PORT, consolePathPrefix, consolePublicOrigin } from './web/options.js';
import { parseUsers, roleProblem, userNameProblem, type ConsoleRole, type ConsoleUser } from './web/users.js';
import { parseStoredPassword } from './web/passwords.js';
import { startConsoleServer } from './web/server.js';
import { defaultConsoleData } from './web/dataLayer.js';
import type { ConsoleData } from './web/consoleData.js';
import type { ConsoleOutbox } from './web/context.js';

// `outbox-relay console`: the operator console in a browser, as a library function. It
// checks its options once, opens one small pool per outbox, and serves until close().

/** A user of the console, given as data instead of a users file. */
export interface ConsoleUserOption {
  name: string;
  role: ConsoleRole;
  /** A scrypt hash (`outbox-relay console-user` prints one) or the password itself. */
  password: string;
}

/** Options of {@link startConsole}. */
export interface ConsoleOptions {
  /** One outbox: its database (the relay's DATABASE_URL)… */
  databaseUrl?: string;
  /** …and schema (default public). Its name in the console is the schema's. */
  schema?: string;
  /** Or several: the outboxes of `run --outboxes-file`. */
  outboxes?: readonly OutboxDefinition[];
  /** Who may log in: the text of a users file (`name:role:password` a line), or the users. */
  users: string | readonly ConsoleUserOption[];
  /** Address to listen on (default 127.0.0.1: loopback only). */
  host?: string;
  /** Port (default 9465; 0 picks a free one). */
  port?: number;
  /** Path the console is served under behind a reverse proxy (`/outbox`; default none). */
  pathPrefix?: string;
  /** Origin browsers reach it at behind a proxy (`https://ops.example.com`; default none). */
  publicOrigin?: string;
  /** Rate a replay form offers first, dead letters per second (default 10). */
  replayRate?: number;
  /** Connections per outbox (default 4). */
  maxConnectionsPerOutbox?: number;
  /** JSON logs, the audit lines among them (default: none). */
  logger?: Logger;
}

/** A running console. */
export interface OperatorConsole {
  /** The start page: `http://host:port/prefix/`. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /**
   * Stop: no new request, running replays aborted between two rows (rows moved stay
   * moved; at most `timeoutMs` waited for them), connections and pools closed. Idempotent.
   */
  close(timeoutMs?: number): Promise<void>;
}

/** How long a console query may run: a page must not hang on a lock. */
const STATEMENT_TIMEOUT_MS = 30_000;

function usersOf(users: ConsoleOptions['users']): ConsoleUser[] {
  if (typeof users === 'string') return parseUsers(users, 'users');
  if (!Array.isArray(users) || users.length === 0) throw new ConfigError('users', 'is required: the console requires a login (see docs/console.md)');
  const names = new Set<string>();
  return users.map((u: ConsoleUserOption, i: number) => {
    const problem = userNameProblem(String(u?.name)) ?? roleProblem(String(u?.role));
    if (problem) throw new ConfigError(`users[${i}]`, problem);
    if (names.has(u.name)) throw new ConfigError(`users[${i}]`, `user ${u.name} is given twice`);
    names.add(u.name);
    const password = typeof u.password === 'string' ? parseStoredPassword(u.password) : { problem: 'has no password' };
    if ('problem' in password) throw new ConfigError(`users[${i}]`, `user ${u.name} ${password.problem}`);
    return { name: u.name, role: u.role, password };
  });
}

function outboxesOf(o: ConsoleOptions): OutboxDefinition[] {
  if (o.outboxes !== undefined) {
    if (o.databaseUrl !== undefined || o.schema !== undefined) throw new ConfigError('outboxes', 'and databaseUrl/schema are both given: each outbox of the list names its own');
    return checkOutboxList(o.outboxes);
  }
  const databaseUrl = optionValue(databaseUrlSetting, o.databaseUrl);
  const schema = optionValue(schemaSetting, o.schema);
  return checkOutboxList([{ name: schema, databaseUrl, schema }]);
}

/**
 * Serve the operator console (docs/console.md). Options are checked before anything
 * opens; the databases are not touched until a page asks.
 *
 * @throws ConfigError for a bad option (no users, a bad prefix, a port in use is an
 *   ordinary listen error)
 */
export async function startConsole(options: ConsoleOptions): Promise<OperatorConsole> {
  const users = usersOf(options.users);
  const list = outboxesOf(options);
  const host = options.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host === '') throw new ConfigError('host', 'must be a host name or address');
  const port = options.port ?? CONSOLE_DEFAULT_PORT;
  if (!Number.isSafeInteger(port) || port < 0 || port > 65_535) throw new ConfigError('port', `${JSON.stringify(port)} is not a port (0 to 65535)`);
  const prefix = optionValue(consolePathPrefix, options.pathPrefix === undefined ? undefined : options.pathPrefix.replace(/\/+$/, ''));
  const publicOrigin = optionValue(consolePublicOrigin, options.publicOrigin);
  const defaultRate = optionValue(replayRate, options.replayRate);
  const max = options.maxConnectionsPerOutbox ?? 4;
  if (!Number.isSafeInteger(max) || max < 1 || max > 32) throw new ConfigError('maxConnectionsPerOutbox', `${JSON.stringify(max)} is not a whole number from 1 to 32`);
  const logger = (options.logger ?? silentLogger()).child({ component: 'console' });

  const outboxes: ConsoleOutbox[] = list.map((o) => {
    const pool = new pg.Pool({
      connectionString: o.databaseUrl,
      application_name: 'outbox-relay:console',
      max,
      connectionTimeoutMillis: 10_000,
      idleTimeoutMillis: 30_000,
      statement_timeout: STATEMENT_TIMEOUT_MS,
    });
    guardPoolClients(pool, logger, { outbox: o.name });
    return { name: o.name, schema: o.schema, pool };
  });
  const endPools = (): Promise<unknown> => Promise.all(outboxes.map((o) => o.pool.end().catch(() => undefined)));
  const data: ConsoleData = defaultConsoleData();
  let server;
  try {
    server = await startConsoleServer({ host, port, prefix, publicOrigin, outboxes, users, data, defaultRate, logger });
  } catch (error) {
    await endPools();
    throw error;
  }
  logger.info({ address: server.url, outboxes: list.map((o) => o.name), users: users.length }, 'console listening');
  const s = server;
  let closing: Promise<void> | undefined;
  return {
    url: s.url,
    host: s.host,
    port: s.port,
    close(timeoutMs = 5_000) {
      closing ??= (async () => {
        await s.close(timeoutMs);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([endPools(), new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
        clearTimeout(timer);
        logger.info('console stopped');
      })();
      return closing;
    },
  };
}
