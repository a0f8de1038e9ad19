import { AsyncLocalStorage } from 'node:async_hooks';
import { inspect } from 'node:util';
import { OutboxError } from './errors.js';

// Calls into the client libraries (kafkajs, @platformatic/kafka, pg) fail in two ways. A
// rejected promise reaches the caller's try/catch like any error. A throw inside one of
// the library's own callbacks (a socket 'data' handler, a timer) reaches nothing of ours:
// it is an uncaughtException, which ends the process, and the call it belonged to never
// settles. @platformatic/kafka 1.35 did that after a broker bounce: its admin's
// listConsumerGroupOffsets looked the group coordinator up in a cached broker list that
// lacked it and handed `undefined` to ConnectionPool.get, whose `broker.host` threw a
// TypeError from the FindCoordinator answer's callback (2.3.1 answers with an error
// instead; the next such bug is why the guard stays). This module turns such a throw
// into a retriable rejection of the calls in flight into that library, and leaves every
// other uncaught error (our own bugs) to end the process as Node would.

/** The client libraries whose calls are guarded. */
export type ClientLibrary = 'kafkajs' | '@platformatic/kafka' | 'pg';

/** Where each library's code lives: a stack frame in one of these is that library's. */
const LIBRARY_PATHS: ReadonlyArray<[ClientLibrary, RegExp]> = [
  ['@platformatic/kafka', /[/\\]node_modules[/\\]@platformatic[/\\]kafka[/\\]/],
  ['kafkajs', /[/\\]node_modules[/\\]kafkajs[/\\]/],
  ['pg', /[/\\]node_modules[/\\]pg(?:-protocol|-pool|-connection-string|-types)?[/\\]/],
];

/**
 * A client library threw outside the call's own promise (from one of its callbacks): the
 * call in flight is failed with this. Retriable: the library's state at that moment
 * (a stale broker list, a connection half set up) is what failed, not the request.
 */
export class LibraryError extends OutboxError {
  readonly library: ClientLibrary;

  constructor(library: ClientLibrary, call: string, cause: unknown) {
    super(`${library} threw inside ${call} (from one of its own callbacks); retried as transient`, { retriable: true, context: { library, call }, cause });
    this.library = library;
  }
}

/**
 * The library whose code threw `error`: the first stack frame outside Node's own
 * modules must be in the library. An error of ours thrown from a callback the library
 * called (a listener of ours) has our frame on top: it is not the library's.
 */
export function libraryOf(error: unknown): ClientLibrary | undefined {
  const stack = error instanceof Error && typeof error.stack === 'string' ? error.stack : undefined;
  if (!stack) return undefined;
  const frames = stack.split('\n').filter((line) => /^\s+at /.test(line));
  const top = frames.find((line) => !/\(node:|at node:|\(<anonymous>\)|at <anonymous>/.test(line));
  if (!top) return undefined;
  return LIBRARY_PATHS.find(([, path]) => path.test(top))?.[0];
}

/** Who hears of a contained library error: one relay (its log line and metric). */
export interface LibraryGuardOwner {
  /** `calls`: how many of the owner's calls in flight into `library` were failed with it. */
  contained(library: ClientLibrary, error: unknown, calls: number): void;
}

interface InFlight {
  library: ClientLibrary;
  call: string;
  owner: LibraryGuardOwner | undefined;
  fail(error: LibraryError): void;
}

const owners: LibraryGuardOwner[] = [];
const inFlight = new Set<InFlight>();
/** The owner of the calls made in an async context: set by {@link runAsLibraryGuardOwner}. */
const currentOwner = new AsyncLocalStorage<LibraryGuardOwner>();

/**
 * Run `fn` (and everything it starts) as `owner`'s: the calls it guards report to it.
 * The relay runs its start and its loops so.
 */
export function runAsLibraryGuardOwner<T>(owner: LibraryGuardOwner, fn: () => T): T {
  return currentOwner.run(owner, fn);
}

/**
 * Call into `library` so that nothing it throws escapes: a synchronous throw becomes a
 * rejection, and a throw from the library's own callbacks while the call is in flight
 * (caught by {@link installLibraryGuard}) rejects it with a {@link LibraryError}, rather
 * than leave it pending forever. `call` names it in that error.
 */
export function guardLibraryCall<T>(library: ClientLibrary, call: string, fn: () => Promise<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const entry: InFlight = { library, call, owner: currentOwner.getStore(), fail: reject };
    inFlight.add(entry);
    const settle = (): void => void inFlight.delete(entry);
    let work: Promise<T>;
    try {
      work = fn();
    } catch (error) {
      settle();
      reject(error);
      return;
    }
    Promise.resolve(work).then(
      (value) => {
        settle();
        resolve(value);
      },
      (error: unknown) => {
        settle();
        reject(error);
      },
    );
  });
}

/** Calls in flight into each library (tests check that a fault was injected while one was). */
export function libraryCallsInFlight(library: ClientLibrary): number {
  let n = 0;
  for (const entry of inFlight) if (entry.library === library) n++;
  return n;
}

function onUncaught(error: unknown, origin: string): void {
  const library = libraryOf(error);
  if (!library) {
    // Not a library's: the process ends as it would without this listener, unless
    // someone else listens (an application embedding the relay decides for itself).
    if (process.listenerCount('uncaughtException') > 1) return;
    process.stderr.write(`${origin === 'unhandledRejection' ? 'Unhandled rejection' : 'Uncaught exception'}: ${inspect(error)}\n`);
    process.exit(1);
  }
  const failed = new Map<LibraryGuardOwner | undefined, number>();
  for (const entry of [...inFlight]) {
    if (entry.library !== library) continue;
    inFlight.delete(entry);
    entry.fail(new LibraryError(library, entry.call, error));
    failed.set(entry.owner, (failed.get(entry.owner) ?? 0) + 1);
  }
  const told = [...failed].filter(([owner]) => owner !== undefined && owners.includes(owner));
  // No call of an installed owner in flight (a library timer threw): the first owner reports it.
  if (told.length === 0 && owners[0]) told.push([owners[0], 0]);
  for (const [owner, calls] of told) owner!.contained(library, error, calls);
}

/**
 * Keep a client library's throw from ending the process while `owner` runs: a
 * process-wide `uncaughtException` listener (one, whatever the number of owners) that
 * contains errors thrown by a library's code (see {@link libraryOf}) and fails the calls
 * in flight into it. Returns the function that removes `owner`; the listener goes with
 * the last one.
 */
export function installLibraryGuard(owner: LibraryGuardOwner): () => void {
  if (owners.length === 0) process.on('uncaughtException', onUncaught);
  owners.push(owner);
  let removed = false;
  return () => {
    if (removed) return;
    removed = true;
    owners.splice(owners.indexOf(owner), 1);
    if (owners.length === 0) process.off('uncaughtException', onUncaught);
  };
}
