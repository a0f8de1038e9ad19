// A connection dropped the moment pg-pool hands a client to a waiting connect() must not be
// an uncaught exception (src/shared/database.ts, guardPoolClients). Under load the server's
// last answer and its 57P01 error arrive in one read; here a proxy in front of the real
// Postgres holds the server's bytes and writes them in one piece, which makes that read
// happen every time. Without the guard, each test below ends in an uncaughtException
// ("terminating connection due to administrator command"), as CI saw in
// relay.integration's "backends terminated" test.
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import type pg from 'pg';
import { createPool } from '../src/shared/database.js';
import { silentLogger } from '../src/shared/logger.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { listenOnLoopback } from './helpers/loopback.js';
import { waitFor } from './helpers/wait.js';

let db: TestSchema;
before(async () => {
  db = await createTestSchema('poolerr');
});
after(async () => {
  await db.drop();
});

interface CoalescingProxy {
  port: number;
  /** Hold what the server sends from now on. */
  hold(): void;
  /** Bytes held so far. */
  held(): Buffer;
  /** Whether the server side of the held connection has closed. */
  serverClosed(): boolean;
  /** Write everything held to the client in one write, then pass bytes through again. */
  flush(): void;
  close(): Promise<void>;
}

/** A TCP proxy to the tests' Postgres (TEST_DATABASE_URL's host and port); only its latest connection is held. */
async function coalescingProxy(): Promise<CoalescingProxy> {
  const target = new URL(db.databaseUrl);
  const upstreamHost = target.hostname || '127.0.0.1';
  const upstreamPort = Number(target.port || 5432);
  let holding = false;
  let buffer: Buffer[] = [];
  let closed = false;
  let last: { client: net.Socket; server: net.Socket } | undefined;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(upstreamPort, upstreamHost);
    const pair = { client, server: upstream };
    last = pair;
    closed = false;
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    client.on('data', (chunk) => upstream.write(chunk));
    client.on('end', () => upstream.end());
    upstream.on('data', (chunk) => {
      if (holding && last === pair) buffer.push(chunk);
      else client.write(chunk);
    });
    upstream.on('end', () => {
      if (last === pair) closed = true;
      // The close is passed on with the flush, after the held bytes.
      if (!(holding && last === pair)) client.end();
    });
  });
  const port = await listenOnLoopback(server);
  return {
    port,
    hold: () => {
      holding = true;
    },
    held: () => Buffer.concat(buffer),
    serverClosed: () => closed,
    flush: () => {
      holding = false;
      const bytes = Buffer.concat(buffer);
      buffer = [];
      if (!last) return;
      const { client } = last;
      client.write(bytes);
      // The end comes in a later read than the bytes; the error under test is in the bytes.
      if (closed) setImmediate(() => client.end());
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Whether `bytes` end with a ReadyForQuery message ('Z', length 5, status). */
function endsWithReadyForQuery(bytes: Buffer): boolean {
  const n = bytes.length;
  return n >= 6 && bytes[n - 6] === 0x5a && bytes.readInt32BE(n - 5) === 5;
}

/** Whether `bytes` hold an ErrorResponse with SQLSTATE 57P01 (admin shutdown). */
function holdsAdminShutdown(bytes: Buffer): boolean {
  return bytes.includes(Buffer.from('C57P01\u0000'));
}

async function terminate(applicationName: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1',
    [applicationName],
  );
  return rows[0]!.n;
}

function proxyUrl(port: number): string {
  const url = new URL(db.databaseUrl);
  url.host = `127.0.0.1:${port}`;
  return url.toString();
}

/** The client handed out is unusable, says so on its next query, and the pool recovers. */
async function expectRecovery(pool: pg.Pool, client: pg.PoolClient): Promise<void> {
  await assert.rejects(client.query('SELECT 1'), 'the dropped client fails its next query');
  client.release(true);
  const { rows } = await pool.query<{ one: number }>('SELECT 1 AS one');
  assert.equal(rows[0]!.one, 1, 'a new connection works');
}

test('integration: a backend terminated as its new connection is handed to a waiting connect() is no uncaught exception', async () => {
  const proxy = await coalescingProxy();
  const app = uniqueName('poolerr_new');
  const pool = createPool(proxyUrl(proxy.port), app, 1, silentLogger());
  try {
    proxy.hold();
    const handed = pool.connect();
    // The backend has finished its start-up once its ReadyForQuery is held.
    await waitFor('the new backend held at ReadyForQuery', async () => endsWithReadyForQuery(proxy.held()), { intervalMs: 5 });
    assert.equal(await terminate(app), 1, 'terminated the new backend');
    await waitFor('the 57P01 error held behind it', () => holdsAdminShutdown(proxy.held()) && proxy.serverClosed(), { intervalMs: 5 });
    proxy.flush();
    const client = await handed;
    await expectRecovery(pool, client);
  } finally {
    await pool.end();
    await proxy.close();
  }
});

test('integration: a backend terminated as pool.query releases its client to a waiting connect() is no uncaught exception', async () => {
  const proxy = await coalescingProxy();
  const app = uniqueName('poolerr_query');
  const pool = createPool(proxyUrl(proxy.port), app, 1, silentLogger());
  try {
    // One connection, open and idle.
    await pool.query('SELECT 1');
    proxy.hold();
    const queried = pool.query<{ one: number }>('SELECT 1 AS one');
    // The only client is busy: this connect() waits for it.
    const handed = pool.connect();
    await waitFor("the query's answer held", async () => endsWithReadyForQuery(proxy.held()), { intervalMs: 5 });
    assert.equal(await terminate(app), 1, 'terminated the backend');
    await waitFor('the 57P01 error held behind it', () => holdsAdminShutdown(proxy.held()) && proxy.serverClosed(), { intervalMs: 5 });
    proxy.flush();
    assert.equal((await queried).rows[0]!.one, 1, 'the query got its answer');
    const client = await handed;
    await expectRecovery(pool, client);
  } finally {
    await pool.end();
    await proxy.close();
  }
});
