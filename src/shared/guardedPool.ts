import type pg from 'pg';
import { guardLibraryCall } from './libraryGuard.js';

// pg's promise calls made through a pool or client of the relay go through the library
// guard (./libraryGuard.ts): a throw from pg's own callbacks fails the query in flight as
// transient instead of ending the process. Callback-style calls (pg-pool's own, inside
// pool.query) and submittables (cursors) are left as they are: the call around them is
// the guarded one.

type AnyCall = (...args: unknown[]) => unknown;

function promiseForm(args: unknown[]): boolean {
  const first = args[0] as { submit?: unknown } | null | undefined;
  return typeof args[args.length - 1] !== 'function' && !(first && typeof first === 'object' && typeof first.submit === 'function');
}

function guardMethod(target: object, method: 'query' | 'connect', call: string): void {
  const original = (target as Record<string, AnyCall>)[method]!.bind(target);
  (target as Record<string, AnyCall>)[method] = (...args: unknown[]) =>
    promiseForm(args) ? guardLibraryCall('pg', call, () => original(...args) as Promise<unknown>) : original(...args);
}

/** `client` with its promise-form `query` guarded; returned for chaining. */
export function guardClientCalls<C extends pg.ClientBase>(client: C): C {
  guardMethod(client, 'query', 'client.query');
  return client;
}

/** `pool` with its promise-form `query` and `connect`, and the `query` of every client it opens, guarded. */
export function guardPoolCalls(pool: pg.Pool): pg.Pool {
  guardMethod(pool, 'query', 'pool.query');
  guardMethod(pool, 'connect', 'pool.connect');
  pool.on('connect', (client) => void guardClientCalls(client));
  return pool;
}
