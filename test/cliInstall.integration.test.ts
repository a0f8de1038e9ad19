// Getting the command (docs/cli.md, "Installing the command"): the way the docs give is
// run as written, and what it puts on the PATH is the relay itself, not a launcher in
// front of it. A SIGTERM to the process the user started must stop the relay cleanly
// (exit 0, `relay stopped`) and leave nothing behind: no process of that start, no
// Postgres session of its client id. The second test shows the check catches a launcher
// that does leave the relay running (a shell that runs it in the background).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { enqueue } from '../src/enqueue.js';
import { createTestSchema, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { TEST_PRODUCER } from './helpers/producer.js';
import { waitFor } from './helpers/wait.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const run = promisify(execFile);
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** The commands of docs/cli.md's install block, comments dropped. */
function documentedInstall(): string[] {
  const page = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');
  const block = /## Installing the command[\s\S]*?```sh\n([\s\S]*?)```/.exec(page)?.[1];
  assert.ok(block, 'docs/cli.md has an "Installing the command" section with a shell block');
  return block.split('\n').map((l) => l.replace(/\s+#.*$/, '').trim()).filter((l) => l !== '');
}

let db: TestSchema;
let dir: string;
let binDir: string;
before(async () => {
  db = await createTestSchema('install');
  dir = mkdtempSync(join(tmpdir(), 'outbox-relay-install-'));
  const tarball = `outbox-relay-${VERSION}.tgz`;
  // The documented commands, in a checkout whose dependencies are installed (npm ci: done),
  // with npm's global prefix moved to a directory of the test's own.
  assert.deepEqual(documentedInstall(), ['npm ci', 'npm pack', `npm install --global ./${tarball}`, 'outbox-relay --help']);
  // README's five-minute path gives the same commands on one line.
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  assert.ok(readme.includes(`npm ci && npm pack && npm install --global ./${tarball}\n`), "README's first step is docs/cli.md's install");
  const npmEnv = { ...process.env, npm_config_update_notifier: 'false', npm_config_prefix: join(dir, 'global') };
  await run('npm', ['pack', '--pack-destination', dir], { cwd: ROOT, env: npmEnv, maxBuffer: 64 << 20 });
  assert.ok(existsSync(join(dir, tarball)), `npm pack wrote ${tarball}, the name docs/cli.md gives`);
  await run('npm', ['install', '--global', '--no-audit', '--no-fund', '--prefer-offline', `./${tarball}`], { cwd: dir, env: npmEnv, maxBuffer: 64 << 20 });
  const { stdout: prefix } = await run('npm', ['prefix', '--global'], { env: npmEnv });
  binDir = join(prefix.trim(), 'bin');
  assert.ok(existsSync(join(binDir, 'outbox-relay')), `npm install --global put outbox-relay in ${binDir}`);
});
after(async () => {
  await db.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** Pids of live processes whose environment carries `mark` (this user's processes). */
function processesMarked(mark: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, 'latin1').split('\0').includes(mark)) found.push(Number(entry));
    } catch {
      // Gone meanwhile, or another user's.
    }
  }
  return found;
}

async function sessionsOf(clientId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE $1', [`${clientId}%`]);
  return rows[0]!.n;
}

/** Start `command` as a user would (by name, through PATH), a relay on a fresh topic; resolves once a row went out. */
async function startRelay(command: string, args: string[]) {
  const mark = `OUTBOX_INSTALL_TEST_MARK=${randomUUID()}`;
  const clientId = `install-${randomUUID().slice(0, 8)}`;
  const topic = await createTopic(1);
  const child = spawn(command, args, {
    cwd: dir,
    env: {
      // The harness's preload rides along (NODE_OPTIONS): it checks the adapter this relay announces.
      ...process.env,
      PATH: `${binDir}:${process.env.PATH}`,
      DATABASE_URL: db.databaseUrl,
      KAFKA_BROKERS: testBrokers().join(','),
      OUTBOX_SCHEMA: db.schema,
      OUTBOX_CLIENT_ID: clientId,
      OUTBOX_METRICS_ADDRESS: 'off',
      OUTBOX_PRODUCER: TEST_PRODUCER,
      [mark.split('=')[0]!]: mark.split('=')[1],
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | string>((done) => child.on('exit', (code, signal) => done(code ?? signal ?? 'unknown')));
  const client = await db.pool.connect();
  try {
    await enqueue(client, { topic, key: 'k', payload: { n: 1 } }, { schema: db.schema });
  } finally {
    client.release();
  }
  await waitFor('the row to be sent', async () => {
    const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NOT NULL`, [topic]);
    return rows[0]!.n === 1;
  });
  // The precondition of what follows: the relay runs, seen from both sides.
  assert.ok(processesMarked(mark).length >= 1, 'the relay process is found by its mark');
  assert.ok((await sessionsOf(clientId)) >= 1, 'the relay has Postgres sessions under its client id');
  return { child, exited, output: () => output, mark, clientId };
}

test('integration: `outbox-relay run` installed the documented way (npm pack, npm install --global) stops cleanly on a SIGTERM to the process the user started, leaving no relay behind', async () => {
  const relay = await startRelay('outbox-relay', ['run']);
  assert.deepEqual(processesMarked(relay.mark), [relay.child.pid], 'the process started is the relay itself: no launcher in front of it');
  relay.child.kill('SIGTERM');
  assert.equal(await relay.exited, 0, relay.output());
  assert.match(relay.output(), /relay stopped/);
  assert.deepEqual(processesMarked(relay.mark), [], 'no process of that start is left');
  await waitFor('its Postgres sessions to end', async () => (await sessionsOf(relay.clientId)) === 0, { timeoutMs: 10_000 });
});

test('integration: the same check catches a launcher that leaves the relay running (a shell running it in the background), so it can fail', async () => {
  const relay = await startRelay('sh', ['-c', 'outbox-relay run & wait']);
  relay.child.kill('SIGTERM');
  await relay.exited;
  try {
    const left = processesMarked(relay.mark);
    assert.equal(left.length, 1, 'the relay outlived the process the user started');
    assert.ok((await sessionsOf(relay.clientId)) >= 1, 'and still holds its Postgres sessions');
  } finally {
    for (const pid of processesMarked(relay.mark)) process.kill(pid, 'SIGTERM');
    await waitFor('the orphan to be stopped', () => processesMarked(relay.mark).length === 0, { timeoutMs: 30_000 });
  }
});
