import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { OutboxError } from '../shared/errors.js';

// Keeps a handler from ending the consumer's transaction. A handler that ran COMMIT on
// ctx.client would commit the idempotency keys of every message of its group, whose
// handlers then run outside any transaction or never: a silent loss. Two layers:
//
//   guardClient      the client handlers get refuses transaction-control statements
//                    (BEGIN, COMMIT, ROLLBACK, END, ABORT, START TRANSACTION, PREPARE
//                    TRANSACTION, the AND CHAIN forms, several statements in one string)
//                    before they are sent, and release()
//   endedBy          after each handler: is the consumer's transaction still the one open?
//                    Free when the guard saw every query the handler sent; otherwise one
//                    read of a transaction-local marker set at BEGIN (it disappears when
//                    the transaction ends, whatever ended it)
//   close            when the handler's run is over: from then on the client, and the
//                    context's helpers, refuse every use. Without it the proxy forwarded
//                    to the raw client for ever: an afterCommit hook's INSERT on ctx.client
//                    ran after the COMMIT, outside any transaction, on a connection already
//                    back in the pool (possibly inside another partition's transaction)

/** Savepoint names starting with this are the consumer's; handlers may use any other. */
const RESERVED_SAVEPOINT_PREFIX = 'outbox_relay';

/** The savepoint the consumer opens around each message with savepoints. */
export const MESSAGE_SAVEPOINT = 'outbox_relay_message';

/** The transaction-local setting that marks the consumer's transaction. */
const MARKER_SETTING = 'outbox_relay.tx';

/** A fresh marker for one transaction (hex: safe to inline in SQL text). */
export function newTransactionMarker(): string {
  return randomBytes(8).toString('hex');
}

/**
 * BEGIN, and set the marker for the rest of the transaction, in one round trip; it also
 * reads the server process id (`pid`), which a handler timeout ends (handlerTimeout.ts).
 */
export function beginSql(marker: string): string {
  return `BEGIN; SELECT set_config('${MARKER_SETTING}', '${marker}', true), pg_backend_pid() AS pid`;
}

/** Reads the marker back: NULL or '' outside the transaction that set it. */
const READ_MARKER_SQL = `SELECT current_setting('${MARKER_SETTING}', true) AS marker`;

/** A handler sent a statement that would end or replace the consumer's transaction. */
export class TransactionControlRefused extends OutboxError {
  constructor(statement: string) {
    super(
      `the handler sent ${statement} on ctx.client; the consumer runs the transaction (it alone begins, commits and rolls back), ` +
        'so the statement was not sent and the message fails',
      { retriable: false, context: { statement } },
    );
  }
}

/** A handler ended the consumer's transaction (found after the handler returned). */
export class HandlerEndedTransaction extends OutboxError {
  constructor(how: string) {
    super(
      `the handler ended the consumer's transaction (${how}); its message fails, and its effects up to that point may be committed: ` +
        'never COMMIT, ROLLBACK or BEGIN on ctx.client',
      { retriable: false, context: { how } },
    );
  }
}

/**
 * ctx.client, or a helper of the context, used after the handler's run was over (in an
 * afterCommit hook, a callback or timer left running, a handler given up on): the
 * statement was not sent.
 */
export class HandlerClientClosed extends OutboxError {
  constructor(what: string) {
    super(
      `${what} used after its handler's run was over: the transaction it belonged to has ended or belongs to other messages now, and its connection ` +
        'may be back in the pool, so the statement was not sent; do database work inside the handler (an afterCommit hook runs after the COMMIT)',
      { retriable: false, context: { what } },
    );
  }
}

/** Command tags that say a transaction ended or began. */
const ENDING_TAGS = new Set(['COMMIT', 'BEGIN', 'START']);
/** Command tags that may or may not have: ROLLBACK is also ROLLBACK TO SAVEPOINT's, PREPARE also a prepared statement's. */
const AMBIGUOUS_TAGS = new Set(['ROLLBACK', 'PREPARE']);

/**
 * What the guard saw of one handler run. A new one per run: a refusal or a finding
 * belongs to that message.
 */
export class ClientGuard {
  /** The client the handler gets. */
  readonly client: pg.PoolClient;
  /** The first statement refused (the handler may have caught the error: it fails anyway). */
  refused: TransactionControlRefused | undefined;
  /** A command tag that says the transaction ended or began. */
  private ended: string | undefined;
  /** Something the guard could not see the outcome of: the marker must be read. */
  private unseen = false;
  private inFlight = 0;
  /** The handler's run is over: every use is refused. */
  private closed = false;

  constructor(private readonly raw: pg.PoolClient) {
    const guard = this;
    const query = (...args: unknown[]): unknown => guard.query(args);
    const release = (): void => {
      if (guard.closed) throw new HandlerClientClosed('ctx.client.release()');
      const error = new TransactionControlRefused('release()');
      guard.refused ??= error;
      throw error;
    };
    const internal = (prop: string | symbol): void => {
      // The guard's own calls go to the raw client, never through here: internals read
      // through the handler's client mean a query the guard does not see.
      if (typeof prop === 'string' && (prop.startsWith('_') || prop === 'connection')) guard.unseen = true;
    };
    this.client = new Proxy(raw, {
      get(target, prop) {
        if (prop === 'query') return query;
        if (prop === 'release') return release;
        internal(prop);
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
      getOwnPropertyDescriptor(target, prop) {
        internal(prop);
        return Reflect.getOwnPropertyDescriptor(target, prop);
      },
    });
  }

  /**
   * The handler's run is over (it returned, threw, or was given up on): from now on the
   * client refuses every query and the context's helpers refuse to run
   * ({@link HandlerClientClosed}). Idempotent.
   */
  close(): void {
    this.closed = true;
  }

  /** @throws HandlerClientClosed once {@link close} was called: for the context's helpers. */
  assertOpen(what: string): void {
    if (this.closed) throw new HandlerClientClosed(what);
  }

  private query(args: unknown[]): unknown {
    const first = args[0] as { text?: unknown; submit?: unknown } | string | undefined;
    const text = typeof first === 'string' ? first : typeof first?.text === 'string' ? first.text : undefined;
    const statement = this.closed || text === undefined ? undefined : transactionControlStatement(text);
    const callback = typeof args[args.length - 1] === 'function' ? (args[args.length - 1] as (error: unknown, result: unknown) => void) : undefined;
    if (this.closed || statement !== undefined) {
      let error: OutboxError;
      if (this.closed) error = new HandlerClientClosed('ctx.client.query()');
      else {
        const refused = new TransactionControlRefused(statement as string);
        this.refused ??= refused;
        error = refused;
      }
      if (callback) {
        process.nextTick(() => callback(error, undefined));
        return undefined;
      }
      if (first && typeof first === 'object' && typeof first.submit === 'function') throw error;
      return Promise.reject(error);
    }
    const rawQuery = this.raw.query.bind(this.raw) as (...a: unknown[]) => unknown;
    if (first && typeof first === 'object' && typeof first.submit === 'function') {
      // A Submittable (a cursor, a stream): its results are not ours to see.
      this.unseen = true;
      return rawQuery(...args);
    }
    if (text === undefined) this.unseen = true;
    this.inFlight++;
    if (callback) {
      const wrapped = (error: unknown, result: unknown): void => {
        this.settled(error, result);
        callback(error, result);
      };
      return rawQuery(...args.slice(0, -1), wrapped);
    }
    const promise = rawQuery(...args) as Promise<unknown>;
    return promise.then(
      (result) => {
        this.settled(undefined, result);
        return result;
      },
      (error: unknown) => {
        this.settled(error, undefined);
        throw error;
      },
    );
  }

  private settled(error: unknown, result: unknown): void {
    this.inFlight--;
    // A failed multi-statement query hides the tags of the statements that ran.
    if (error !== undefined && error !== null) this.unseen = true;
    for (const r of Array.isArray(result) ? result : [result]) {
      const tag = (r as { command?: unknown } | undefined)?.command;
      if (typeof tag !== 'string') continue;
      if (ENDING_TAGS.has(tag)) this.ended ??= `it ran a statement that completed as ${tag}`;
      else if (AMBIGUOUS_TAGS.has(tag)) this.unseen = true;
    }
  }

  /**
   * After the handler: how it ended the consumer's transaction, or undefined when the
   * transaction it got is still open (possibly aborted: that is the caller's to find).
   */
  async endedBy(marker: string): Promise<string | undefined> {
    if (this.ended) return this.ended;
    const status = transactionStatus(this.raw);
    if (status === 'I') return 'no transaction was open after it';
    // Unknown status (an older pg behind the caller's pool): always read the marker.
    if (this.inFlight > 0 || status === null) this.unseen = true;
    if (!this.unseen || status === 'E') return undefined;
    // Queued behind whatever the handler left in flight.
    let value: string | null | undefined;
    try {
      const { rows } = await this.raw.query<{ marker: string | null }>(READ_MARKER_SQL);
      value = rows[0]?.marker;
    } catch (error) {
      if ((error as { code?: unknown })?.code === '25P02') return undefined; // aborted: the caller's
      throw error;
    }
    if (value === marker) return undefined;
    return transactionStatus(this.raw) === 'I' ? 'no transaction was open after it' : 'another transaction was open after it';
  }
}

/**
 * pg's transaction status after the last ReadyForQuery: 'I' idle (no transaction), 'T' in
 * one, 'E' in an aborted one; null when unknown (a pg without getTransactionStatus).
 */
export function transactionStatus(client: pg.PoolClient): 'I' | 'T' | 'E' | null {
  const get = (client as { getTransactionStatus?: () => 'I' | 'T' | 'E' | null }).getTransactionStatus;
  return typeof get === 'function' ? (get.call(client) ?? null) : null;
}

/** The client a handler gets for this run, and what it saw. */
export function guardClient(client: pg.PoolClient): ClientGuard {
  return new ClientGuard(client);
}

/**
 * The first statement of `sql` that would end, begin or split the consumer's
 * transaction, as a short description, or undefined when there is none. Knows SQL's
 * comments, quoted strings (E'' included), quoted identifiers, dollar quoting and
 * BEGIN ATOMIC function bodies, so text inside them is never mistaken for a statement.
 * Savepoints are allowed, except those named with {@link RESERVED_SAVEPOINT_PREFIX}.
 */
export function transactionControlStatement(sql: string): string | undefined {
  // Most queries hold none of the words a rule starts with: one native scan says so.
  if (!CONTROL_WORD.test(sql)) return undefined;
  for (const words of statements(sql)) {
    const found = checkStatement(words);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** The words a transaction-control or savepoint statement starts with, anywhere in the text. */
const CONTROL_WORD = /(?:^|[^A-Za-z0-9_$\u0080-\uffff])(?:BEGIN|START|COMMIT|END|ABORT|ROLLBACK|PREPARE|SAVEPOINT|RELEASE)(?![A-Za-z0-9_$\u0080-\uffff])/i;

/** A word of a statement: an unquoted keyword or name (upper-cased), or a quoted identifier. */
interface Word {
  text: string;
  quoted: boolean;
}

function checkStatement(words: Word[]): string | undefined {
  const kw = (i: number): string | undefined => (words[i] && !words[i].quoted ? words[i].text : undefined);
  const first = kw(0);
  switch (first) {
    case 'BEGIN':
    case 'COMMIT':
    case 'END':
    case 'ABORT':
      return kw(1) === 'AND' ? `${first} ${chain(kw(2))}` : kw(1) === 'PREPARED' ? `${first} PREPARED` : first;
    case 'START':
      return 'START TRANSACTION';
    case 'PREPARE':
      return kw(1) === 'TRANSACTION' ? 'PREPARE TRANSACTION' : undefined;
    case 'ROLLBACK': {
      let i = 1;
      if (kw(i) === 'WORK' || kw(i) === 'TRANSACTION') i++;
      if (kw(i) !== 'TO') return kw(i) === 'AND' ? `ROLLBACK ${chain(kw(i + 1))}` : kw(i) === 'PREPARED' ? 'ROLLBACK PREPARED' : 'ROLLBACK';
      i++;
      if (kw(i) === 'SAVEPOINT' && words[i + 1]) i++;
      return reservedSavepoint('ROLLBACK TO SAVEPOINT', words[i]);
    }
    case 'SAVEPOINT':
      return reservedSavepoint('SAVEPOINT', words[1]);
    case 'RELEASE':
      return reservedSavepoint('RELEASE SAVEPOINT', kw(1) === 'SAVEPOINT' && words[2] ? words[2] : words[1]);
    default:
      return undefined;
  }
}

function chain(next: string | undefined): string {
  return next === 'NO' ? 'AND NO CHAIN' : 'AND CHAIN';
}

function reservedSavepoint(statement: string, name: Word | undefined): string | undefined {
  if (!name) return undefined;
  const value = name.quoted ? name.text : name.text.toLowerCase();
  return value.startsWith(RESERVED_SAVEPOINT_PREFIX) ? `${statement} ${value} (savepoints named ${RESERVED_SAVEPOINT_PREFIX}* are the consumer's)` : undefined;
}

/** How many leading words of a statement are kept: enough for the longest rule. */
const LEADING_WORDS = 5;

/** The leading words of each statement of `sql`. */
function statements(sql: string): Word[][] {
  const out: Word[][] = [];
  let words: Word[] = [];
  let tokens = 0; // tokens of the current statement, words or not
  // Inside a BEGIN ATOMIC body (CREATE FUNCTION ... BEGIN ATOMIC ...; END): its
  // semicolons do not end the statement. Depth counts CASE ... END inside it.
  let atomicDepth = 0;
  let previousWord: string | undefined;
  const n = sql.length;
  // One statement (the usual case): its leading words are all that matter.
  const single = !sql.includes(';');
  let i = 0;
  const push = (word: Word): void => {
    if (tokens++ < LEADING_WORDS && tokens === words.length + 1) words.push(word);
    if (word.quoted) {
      previousWord = undefined;
      return;
    }
    const upper = word.text;
    if (atomicDepth > 0) {
      if (upper === 'CASE') atomicDepth++;
      else if (upper === 'END') atomicDepth--;
    } else if (upper === 'ATOMIC' && previousWord === 'BEGIN' && words[0]?.text === 'CREATE') {
      atomicDepth = 1;
    }
    previousWord = upper;
  };
  const other = (): void => {
    tokens++;
    previousWord = undefined;
  };
  while (i < n) {
    if (single && tokens >= LEADING_WORDS) break;
    const c = sql[i] as string;
    if (c === ';' && atomicDepth === 0) {
      if (tokens > 0) out.push(words);
      words = [];
      tokens = 0;
      previousWord = undefined;
      i++;
    } else if (isSpace(sql.charCodeAt(i))) {
      i++;
    } else if (c === '-' && sql[i + 1] === '-') {
      const end = sql.indexOf('\n', i);
      i = end < 0 ? n : end + 1;
    } else if (c === '/' && sql[i + 1] === '*') {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        if (sql[i] === '/' && sql[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (sql[i] === '*' && sql[i + 1] === '/') {
          depth--;
          i += 2;
        } else i++;
      }
    } else if (c === "'") {
      i = skipString(sql, i, false);
      other();
    } else if (c === '"') {
      let j = i + 1;
      let text = '';
      while (j < n) {
        if (sql[j] === '"') {
          if (sql[j + 1] === '"') {
            text += '"';
            j += 2;
            continue;
          }
          break;
        }
        text += sql[j];
        j++;
      }
      i = j + 1;
      push({ text, quoted: true });
    } else if (c === '$') {
      const tag = /^\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/.exec(sql.slice(i, i + 256));
      if (tag) {
        const end = sql.indexOf(tag[0], i + tag[0].length);
        i = end < 0 ? n : end + tag[0].length;
      } else i++; // $1, a parameter
      other();
    } else if (isWordStart(sql.charCodeAt(i))) {
      let j = i + 1;
      while (j < n && isWordPart(sql.charCodeAt(j))) j++;
      const word = sql.slice(i, j);
      if ((word === 'E' || word === 'e') && sql[j] === "'") {
        i = skipString(sql, j, true);
        other();
      } else {
        i = j;
        push({ text: word.toUpperCase(), quoted: false });
      }
    } else {
      i++;
      other();
    }
  }
  if (tokens > 0) out.push(words);
  return out;
}

function isSpace(code: number): boolean {
  return code === 32 || (code >= 9 && code <= 13) || code === 0xa0 || code === 0xfeff;
}

/** A letter, `_`, or any non-ASCII character: what starts an unquoted SQL word. */
function isWordStart(code: number): boolean {
  return (code >= 97 && code <= 122) || (code >= 65 && code <= 90) || code === 95 || code >= 0x80;
}

function isWordPart(code: number): boolean {
  return isWordStart(code) || (code >= 48 && code <= 57) || code === 36;
}

/** The index after the string literal that starts at `start` (a quote). */
function skipString(sql: string, start: number, backslashEscapes: boolean): number {
  let i = start + 1;
  while (i < sql.length) {
    const c = sql[i];
    if (backslashEscapes && c === '\\') i += 2;
    else if (c === "'") {
      if (sql[i + 1] === "'") i += 2;
      else return i + 1;
    } else i++;
  }
  return i;
}
