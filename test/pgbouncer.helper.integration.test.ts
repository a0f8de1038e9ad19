// The PgBouncer helper itself (scripts/pgbouncer.ts): the pooling the other
// test/pgbouncer.*.integration.test.ts files rely on is real, restart() really replaces
// the process on the same port, stop() leaves nothing running, and the CLI does the same.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { createServer } from 'node:net';
import { startPgBouncer } from './helpers/pgbouncer.js';
import { freePorts } from '../scripts/ports.js';

const execFileAsync = promisify(execFile);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

const backend = async (client: pg.Client): Promise<number> => (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;

test('integration: transaction pooling is real: two clients share one server connection, session state does not survive a transaction', async () => {
  const bouncer = await startPgBouncer({ mode: 'transaction', poolSize: 1 });
  try {
    assert.match(bouncer.url(), /^postgres:\/\/postgres@127\.0\.0\.1:\d+\/test$/);
    assert.equal(bouncer.url('postgres'), `postgres://postgres@127.0.0.1:${bouncer.port}/postgres`);
    const a = await connect(bouncer.url());
    const b = await connect(bouncer.url());
    // One server connection in the pool: both clients' transactions run on the same backend.
    assert.equal(await backend(a), await backend(b), 'two clients, one backend, at different times');

    // A session SET made by one client is on the shared backend, not on the client:
    // the other client sees it in its next transaction.
    // (lock_timeout: a setting PgBouncer does not track and restore per client.)
    await a.query("SET lock_timeout = '12345ms'");
    const seen = (await b.query<{ value: string }>("SELECT current_setting('lock_timeout') AS value")).rows[0]!.value;
    assert.equal(seen, '12345ms', 'the SET leaked to another client: nothing session-level belongs to a client');

    // Named prepared statements belong to the backend too: PgBouncer 1.18 does not track them.
    await a.query({ name: 'probe_statement', text: 'SELECT 1 AS one' });
    await assert.rejects(b.query({ name: 'probe_statement', text: 'SELECT 1 AS one' }), /prepared statement "probe_statement" already exists/);

    const pools = await bouncer.admin('SHOW POOLS');
    const pool = pools.find((row) => row.database === 'test' && row.user === 'postgres');
    assert.equal(pool?.pool_mode, 'transaction');
    await a.end();
    await b.end();
  } finally {
    await bouncer.stop();
  }
});

test('integration: session pooling keeps session state on the client; restart() replaces the process on the same port; stop() leaves none', async () => {
  const bouncer = await startPgBouncer({ mode: 'session' });
  const dir = bouncer.dir;
  try {
    const a = await connect(bouncer.url());
    const b = await connect(bouncer.url());
    assert.notEqual(await backend(a), await backend(b), 'each client has a server connection of its own');
    await a.query("SET lock_timeout = '12345ms'");
    await b.query('SELECT 1');
    const mine = (await a.query<{ value: string }>("SELECT current_setting('lock_timeout') AS value")).rows[0]!.value;
    assert.equal(mine, '12345ms', 'a SET lasts for the session');
    const theirs = (await b.query<{ value: string }>("SELECT current_setting('lock_timeout') AS value")).rows[0]!.value;
    assert.notEqual(theirs, '12345ms');

    const before = bouncer.pid();
    assert.ok(before !== undefined && alive(before));
    await bouncer.restart();
    const after = bouncer.pid();
    assert.ok(after !== undefined && after !== before && alive(after), `a new process (${before} -> ${after})`);
    assert.ok(!alive(before), 'the old process is gone');
    // The restart dropped every client: their connections are closed, new ones work.
    await assert.rejects(a.query('SELECT 1'));
    const c = await connect(bouncer.url());
    assert.equal((await c.query<{ one: number }>('SELECT 1 AS one')).rows[0]!.one, 1);
    await c.end();
    await a.end().catch(() => undefined);
    await b.end().catch(() => undefined);

    await bouncer.stop();
    assert.ok(!alive(after), 'stop() killed it');
    assert.equal(existsSync(dir), false, 'the directory the helper made is deleted');
    await assert.rejects(connect(bouncer.url()), /ECONNREFUSED/);
  } finally {
    await bouncer.stop();
  }
});

test('integration: the CLI starts, restarts and stops PgBouncer in a directory and prints 127.0.0.1:PORT', async () => {
  const dir = mkdtempSync('/tmp/outbox-pgbouncer-cli-');
  const cli = (...args: string[]): Promise<{ stdout: string }> => execFileAsync(process.execPath, ['--import', 'tsx', 'scripts/pgbouncer.ts', ...args], { encoding: 'utf8' });
  try {
    const started = (await cli('start', '--dir', dir, '--mode', 'transaction', '--pg-port', '5432', '--database', 'test')).stdout.trim();
    assert.match(started, /^127\.0\.0\.1:\d+$/);
    const url = `postgres://postgres@${started}/test`;
    const pid = Number(readFileSync(join(dir, 'pgbouncer.pid'), 'utf8'));
    assert.ok(alive(pid));
    const client = await connect(url);
    assert.equal((await client.query<{ one: number }>('SELECT 1 AS one')).rows[0]!.one, 1);
    await client.end();

    assert.equal((await cli('restart', '--dir', dir)).stdout.trim(), started, 'same address after a restart');
    const restarted = Number(readFileSync(join(dir, 'pgbouncer.pid'), 'utf8'));
    assert.ok(restarted !== pid && alive(restarted) && !alive(pid));

    await cli('stop', '--dir', dir);
    assert.ok(!alive(restarted), 'stop killed it');
    await assert.rejects(connect(url), /ECONNREFUSED/);
    await assert.rejects(cli('start', '--dir', dir, '--mode', 'statement'), (error: Error & { code?: number }) => error.code === 2);
  } finally {
    await cli('stop', '--dir', dir).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** Pids of the live processes whose command line names `ini` (a daemon of that directory). */
function processesOf(ini: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').includes(ini) && alive(Number(entry))) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

test('integration: a PgBouncer that is not ready in time: the start fails and the daemon is not left running', async () => {
  const dir = mkdtempSync('/tmp/outbox-pgbouncer-unready-');
  const ini = join(dir, 'pgbouncer.ini');
  try {
    // 0 ms: the readiness wait, which runs only once `pgbouncer -d` has detached its daemon, gives up at once.
    await assert.rejects(startPgBouncer({ mode: 'transaction', dir, readyTimeoutMs: 0 }), /not ready after 0 ms/);
    assert.ok(existsSync(ini), 'precondition: the daemon was started on this ini');
    assert.deepEqual(processesOf(ini), [], 'no daemon of this directory is left running');
  } finally {
    for (const pid of processesOf(ini)) process.kill(pid, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('integration: a PgBouncer whose picked port was taken before it bound it starts on a new one', async () => {
  const held = createServer();
  await new Promise<void>((r) => held.listen(0, '127.0.0.1', r));
  const taken = (held.address() as { port: number }).port;
  let calls = 0;
  const portSource = async (count: number): Promise<number[]> => (++calls === 1 ? [taken] : freePorts(count));
  try {
    const bouncer = await startPgBouncer({ mode: 'transaction', portSource });
    try {
      assert.equal(calls, 2, 'the first start failed on the taken port and a second one ran');
      assert.notEqual(bouncer.port, taken);
      const client = new pg.Client({ connectionString: bouncer.url() });
      await client.connect();
      assert.equal((await client.query<{ one: number }>('SELECT 1 AS one')).rows[0]!.one, 1);
      await client.end();
    } finally {
      await bouncer.stop();
    }
  } finally {
    held.close();
  }
});
