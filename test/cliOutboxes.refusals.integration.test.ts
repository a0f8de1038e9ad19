import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATABASE_URL } from './helpers/db.js';
import { migrate } from '../src/commands/migrate.js';
import { spawnCli } from './helpers/processes.js';
import { outboxesCli } from './helpers/outboxesCli.js';

// `outbox-relay` refusing misuse of a list of outboxes: every case exits 2 with one line
// and touches nothing. No relay starts here (the relay over a list is in
// cliOutboxes.integration.test.ts), so CI's second pass, which runs again the files that
// started a relay, does not run these again.

const { SECRET, URL_WITH_PASSWORD, schemas, admin, file, cli } = outboxesCli();

test('integration: misuse of the outbox flags exits 2 with one line and touches nothing', async () => {
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['dead-letters', 'list', '--outboxes-file', file], {}, /--outbox: is required: the list has 2 outboxes \(one, two\)/],
    [['cleanup', '--outboxes-file', file, '--outbox', 'three'], {}, /--outbox: "three" is not in the list \(one, two\)/],
    [['status', '--outbox', 'one'], { DATABASE_URL }, /--outbox: needs a list of outboxes/],
    [['run', '--outboxes-file', file], { DATABASE_URL }, /DATABASE_URL: and a list of outboxes are both set/],
    [['run', '--outboxes-file', file, '--schema', 'x'], {}, /--schema: is per outbox/],
    [['run', '--outboxes-file', '/nonexistent/outboxes.json'], {}, /cannot read \/nonexistent\/outboxes.json/],
    [['run', '--outboxes-file', file, '--max-database-connections', '5'], {}, /need up to 18 connections/],
    [['run'], { OUTBOX_OUTBOXES: 'one', OUTBOX_ONE_DATABASE_URL: 'postgres://u:pw-x@h:5432/d@x' }, /outbox one: database URL: has an '@' after the host/],
  ];
  for (const [args, extra, pattern] of cases) {
    const r = await cli(args, extra);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
    assert.match(r.output, pattern, args.join(' '));
    assert.equal(r.output.trim().split('\n').length, 1, `one line: ${r.output}`);
    assert.ok(!r.output.includes('pw-x') && !r.output.includes(SECRET), r.output);
  }
});

/** Every command and subcommand path of the CLI, read from its help (so a new command cannot be left out of a test). */
async function commandPaths(prefix: string[] = []): Promise<string[][]> {
  const p = spawnCli([...prefix, '--help'], {});
  assert.equal(await p.exited, 0, p.output());
  const names = (p.output().split(/^Commands:$/m)[1] ?? '')
    .split('\n')
    .map((l) => /^ {2}([a-z-]+)/.exec(l)?.[1])
    .filter((n): n is string => n !== undefined && n !== 'help');
  const paths: string[][] = [];
  for (const name of names) {
    const sub = await commandPaths([...prefix, name]);
    paths.push(...(sub.length ? sub : [[...prefix, name]]));
  }
  return paths;
}

test('integration: --schema and OUTBOX_SCHEMA beside a list are refused by every command (exit 2, one line), and nothing is touched', async () => {
  await migrate({ databaseUrl: DATABASE_URL, schema: schemas[0]! });
  const one = join(mkdtempSync(join(tmpdir(), 'outboxes-')), 'one.json');
  writeFileSync(one, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }] }));
  // A sent row well past cleanup's retention: `cleanup --schema mb` once deleted it.
  const { rows: inserted } = await admin.query<{ id: number }>(
    `INSERT INTO "${schemas[0]}".outbox (topic, key, payload, sent_at) VALUES ('t', 'k', '{}', now() - interval '30 days') RETURNING id`,
  );
  const extraArgs: Record<string, string[]> = {
    'dead-letters replay': ['--all'],
    'dead-letters discard': ['--all', '--yes'],
    'dead-letters unpark': ['--topic', 't', '--key', 'k'],
    'debezium attach': ['--table', `${schemas[0]}.outboxevent`],
    'debezium print': ['--table', `${schemas[0]}.outboxevent`],
    'debezium detach': ['--table', `${schemas[0]}.outboxevent`],
  };
  const paths = await commandPaths();
  assert.deepEqual(
    paths.map((p) => p.join(' ')).sort(),
    ['cleanup', 'console', 'console-user', 'dead-letters discard', 'dead-letters list', 'dead-letters replay', 'dead-letters unpark', 'debezium attach', 'debezium detach', 'debezium print', 'maintain-partitions', 'migrate', 'partition-outbox', 'purge-processed', 'run', 'status'],
  );
  const runs: Array<Promise<void>> = [];
  // console-user reads a password and prints its hash: it opens no outbox, and has no list to refuse.
  for (const path of [...paths.filter((p) => p.join(' ') !== 'console-user'), ['migrate', '--print']]) {
    const args = [...path, ...(extraArgs[path.join(' ')] ?? []), '--outboxes-file', one];
    for (const [how, extra, setting] of [
      [['--schema', 'mb'], {}, '--schema'],
      [[], { OUTBOX_SCHEMA: 'mb' }, 'OUTBOX_SCHEMA'],
    ] as const) {
      runs.push(
        cli([...args, ...how], extra).then((r) => {
          assert.equal(r.code, 2, `${args.join(' ')} ${setting}: ${r.output}`);
          assert.match(r.output, new RegExp(`^outbox-relay: ${setting}: is per outbox with a list of outboxes`), `${args.join(' ')}: ${r.output}`);
          assert.equal(r.output.trim().split('\n').length, 1, r.output);
        }),
      );
    }
  }
  await Promise.all(runs);
  const { rows } = await admin.query(`SELECT id FROM "${schemas[0]}".outbox WHERE id = $1`, [inserted[0]!.id]);
  assert.equal(rows.length, 1, 'cleanup deleted nothing');
  const schemasNamedMb = await admin.query(`SELECT 1 FROM pg_namespace WHERE nspname = 'mb'`);
  assert.equal(schemasNamedMb.rowCount, 0, 'no schema mb created');
  // Without --schema the same list works: the refusal is about the pair, not the list.
  const fine = await cli(['cleanup', '--outboxes-file', one]);
  assert.equal(fine.code, 0, fine.output);
  assert.match(fine.output, /deleted 1 sent rows/);
});

test('integration: typos in a list are refused with one line naming them: a top-level key of the file, an OUTBOX_<NAME>_* variable, an upper-case schema', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'outboxes-'));
  const withKey = join(dir, 'with-key.json');
  writeFileSync(withKey, JSON.stringify({ kafkaBrokers: '127.0.0.1:1', outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }] }));
  const upper = join(dir, 'upper.json');
  writeFileSync(upper, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: 'Tenant_A' }] }));
  const envList = { OUTBOX_OUTBOXES: 'one', OUTBOX_ONE_DATABASE_URL: URL_WITH_PASSWORD };
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['run', '--outboxes-file', withKey], {}, /^outbox-relay: .*with-key\.json: has unknown top-level key "kafkaBrokers"/],
    [['status', '--outboxes-file', withKey], {}, /has unknown top-level key "kafkaBrokers"/],
    [['run'], { ...envList, OUTBOX_ONE_SHEMA: schemas[0]! }, /^outbox-relay: OUTBOX_ONE_SHEMA: is not a variable of outbox one \(known: .*OUTBOX_ONE_SCHEMA/],
    [['migrate'], { ...envList, OUTBOX_ONE_SHEMA: schemas[0]! }, /^outbox-relay: OUTBOX_ONE_SHEMA: is not a variable of outbox one/],
    [['migrate', '--outboxes-file', upper], {}, /^outbox-relay: outbox one: schema: "Tenant_A" has upper-case letters/],
    [['migrate'], { ...envList, OUTBOX_ONE_SCHEMA: 'Tenant_A' }, /^outbox-relay: OUTBOX_ONE_SCHEMA: "Tenant_A" has upper-case letters/],
    [['run'], { DATABASE_URL_FILE: '/nonexistent/url', OUTBOX_OUTBOXES_FILE: file }, /^outbox-relay: DATABASE_URL_FILE: and a list of outboxes are both set/],
  ];
  for (const [args, extra, pattern] of cases) {
    const r = await cli(args, extra);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.output}`);
    assert.match(r.output, pattern, `${args.join(' ')} ${JSON.stringify(extra)}`);
    assert.equal(r.output.trim().split('\n').length, 1, `one line: ${r.output}`);
    assert.ok(!r.output.includes(SECRET), r.output);
  }
  // A variable of another setting that shares an outbox's prefix is not taken for a typo:
  // an outbox named `batch` beside OUTBOX_BATCH_SIZE (--batch-size).
  const shared = await cli(['migrate', '--print'], { OUTBOX_OUTBOXES: 'batch', OUTBOX_BATCH_DATABASE_URL: URL_WITH_PASSWORD, OUTBOX_BATCH_SCHEMA: schemas[0]!, OUTBOX_BATCH_SIZE: '100' });
  assert.equal(shared.code, 0, shared.output);
  assert.match(shared.output, /^-- outbox batch$/m);
});
