import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer, type Server } from 'node:net';
import { startLocalKafka, startLocalKafkaCluster } from '../scripts/localKafka.js';
import { startLocalPostgres } from '../scripts/localPostgres.js';
import { PORT_TAKEN, ephemeralRange, freePorts, pickRange, startOnFreePorts, type PortSource } from '../scripts/ports.js';

// The local Kafka helper (scripts/localKafka.ts) when a broker does not become ready in
// time: the start fails, and no JVM of that directory is left running (detached, as the
// `start` command runs it, it would outlive everything). Real JVMs, no broker ever ready:
// a readiness timeout of 1 ms fails every start right after the JVM is spawned.

const RUN = resolve(fileURLToPath(new URL('../.cache/kafka/run', import.meta.url)));
const dirs: string[] = [];

/** Pids of the live processes whose command line holds `-Dkafka.logs.dir=<dir>` (our JVMs). */
function jvmsOf(dir: string): number[] {
  const mark = `-Dkafka.logs.dir=${dir}`;
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').includes(mark)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

after(() => {
  // Whatever a failing run left behind, so that it does not outlive the test.
  for (const dir of dirs) {
    for (const pid of [...jvmsOf(dir), ...['', 'node-1'].flatMap((d) => jvmsOf(join(dir, d)))]) process.kill(pid, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});

test('integration: a local broker that is not ready in time: the start fails and its JVM (detached) is stopped, its pid file removed', async () => {
  const dir = join(RUN, `ready-fail-${process.pid}-${Date.now()}`);
  dirs.push(dir);
  await assert.rejects(startLocalKafka({ dir, readyTimeoutMs: 1, detached: true }), /not ready after 1 ms/);
  // The readiness wait, which failed, runs only after the JVM was spawned with its output here.
  assert.ok(existsSync(join(dir, 'stdout.log')), 'precondition: the JVM was spawned');
  assert.deepEqual(jvmsOf(dir), [], 'no JVM of this directory is left running');
  assert.equal(existsSync(join(dir, 'broker.pid')), false, 'no pid file points at a process that is gone');
});

test('integration: a local cluster that is not ready in time: the start fails and none of its nodes is left running', async () => {
  const dir = join(RUN, `ready-fail-cluster-${process.pid}-${Date.now()}`);
  dirs.push(dir);
  await assert.rejects(startLocalKafkaCluster({ dir, nodes: 1, readyTimeoutMs: 1, detached: true }), /not ready after 1 ms/);
  const node = join(dir, 'node-1');
  assert.ok(existsSync(join(node, 'stdout.log')), 'precondition: the node was spawned');
  assert.deepEqual(jvmsOf(node), [], 'no JVM of the cluster is left running');
  assert.equal(existsSync(join(node, 'broker.pid')), false);
});

// A port is free when it is picked and bound by the server seconds later; on a busy machine
// another process takes it in between now and then (CI's fault suite once failed at its start
// that way). The helpers then start again on new ports. A source that hands out a port a
// listening socket of ours holds makes the first start fail that way every time.

/** Listen on a free port and keep it: the port a server will fail to bind. */
async function holdPort(): Promise<Server> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return server;
}

function portOf(server: Server): number {
  return (server.address() as { port: number }).port;
}

/** A port source whose first answer puts `taken` first; later answers are free ports. */
function takenFirst(taken: number): PortSource & { calls: number } {
  const source = async (count: number): Promise<number[]> => {
    source.calls++;
    const ports = await freePorts(count);
    return source.calls === 1 ? [taken, ...ports.slice(1)] : ports;
  };
  source.calls = 0;
  return source;
}

test('freePorts: distinct ports, none in the range outgoing connections take their ports from', async () => {
  const ports = await freePorts(20);
  assert.equal(new Set(ports).size, 20);
  const [low, high] = ephemeralRange();
  for (const port of ports) assert.ok(port < low || port > high, `${port} is outside ${low}-${high}`);
  assert.deepEqual(ephemeralRange('32768\t60999\n'), [32768, 60999]);
  assert.deepEqual(pickRange([32768, 60999]), [10000, 32767]);
  assert.deepEqual(pickRange([1024, 60999]), [61000, 65535], 'a range starting low: the ports above it');
  assert.equal(pickRange([1024, 65000]), undefined, 'no room either side: the kernel picks');
});

test('startOnFreePorts: a start whose port was taken is tried again on new ports; any other failure is not; attempts are bounded', async () => {
  const taken = new Error('listen: Address already in use');
  const seen: number[][] = [];
  let n = 0;
  const started = await startOnFreePorts(
    2,
    async (ports) => {
      seen.push(ports);
      if (++n < 3) throw taken;
      return ports;
    },
    (e) => e === taken,
  );
  assert.equal(seen.length, 3);
  assert.deepEqual(started, seen[2]);
  const other = new Error('initdb failed');
  let tries = 0;
  await assert.rejects(
    startOnFreePorts(1, async () => {
      tries++;
      throw other;
    }, (e) => e === taken),
    other,
  );
  assert.equal(tries, 1, 'a failure that is not a taken port is thrown at once');
  tries = 0;
  await assert.rejects(
    startOnFreePorts(1, async () => {
      tries++;
      throw taken;
    }, (e) => e === taken, { attempts: 3 }),
    taken,
  );
  assert.equal(tries, 3, 'a port taken every time: three attempts, then the error');
});

test('integration: a local broker whose port is taken fails its start as soon as its log says so, with the error the retry looks for; nothing is left running', async () => {
  // The retry itself (startOnFreePorts, above) is the same for every server; the Postgres
  // test below runs it end to end. A second broker start here would cost CI 10 s more.
  const held = await holdPort();
  const dir = join(RUN, `port-taken-${process.pid}-${Date.now()}`);
  dirs.push(dir);
  const started = Date.now();
  try {
    await assert.rejects(startLocalKafka({ dir, port: portOf(held) }), (error: Error) => {
      assert.match(error.message, /could not bind a port: .*Address already in use/);
      assert.ok(PORT_TAKEN.test(error.message), 'the message a picked port would be picked again for');
      return true;
    });
    // A broker that cannot bind takes about 30 s to exit by itself.
    assert.ok(Date.now() - started < 25_000, `failed after ${Date.now() - started} ms`);
    assert.deepEqual(jvmsOf(dir), [], 'the broker that could not bind is not left running');
  } finally {
    held.close();
  }
});

test('integration: a local Postgres whose picked port was taken starts on a new one; the failed start says why', async () => {
  const held = await holdPort();
  const source = takenFirst(portOf(held));
  try {
    const postgres = await startLocalPostgres({ portSource: source });
    try {
      assert.equal(source.calls, 2);
      assert.notEqual(postgres.port, portOf(held));
    } finally {
      await postgres.destroy();
    }
    // Its given port taken: no retry (the caller chose it), and the error carries the log's reason.
    await assert.rejects(startLocalPostgres({ port: portOf(held) }), /Address already in use/);
  } finally {
    held.close();
  }
});
