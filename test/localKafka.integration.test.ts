import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startLocalKafka, startLocalKafkaCluster } from '../scripts/localKafka.js';

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
