import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { CI_LIMIT_SECONDS, parseFaults, parsePhases, renderTable } from '../../scripts/ciTimeTable.js';
import { kafkaJit, kafkaJitFlags } from '../../scripts/kafkaJit.js';

test('the CI time table sums the phases, lists test files slowest first and names a pass that wrote no timings', () => {
  const table = renderTable({
    phases: parsePhases('npm ci\t40\nnpm test (Node 24, platformatic)\t700\nnpm run test:faults\t400\n'),
    passes: [
      { label: 'first pass', pass: { wallSeconds: 690, node: 'v24.1.0', files: [{ file: 'test/a.test.ts', seconds: 3, tests: 2, failed: 0 }, { file: 'test/b.test.ts', seconds: 90.5, tests: 7, failed: 1 }, { file: 'test/x/suite.ts', seconds: null, tests: 4, failed: 0 }] } },
      { label: 'second pass', pass: null },
    ],
    faults: parseFaults(
      '{"command":"npx tsx test/faults/run.ts --profile ci --seed 1","lane":1,"runs":[{"name":"ci-1","seconds":60}],"seconds":80,"ok":true}\n' +
        '{"command":"npx tsx test/faults/run.ts --profile multi-ci --seed 2","lane":2,"runs":[{"name":"multi-ci-2","seconds":50}],"seconds":55,"ok":false}\n' +
        '{"command":"npx tsx test/faults/run.ts --profile pooler-ci --seed 3","lane":1,"runs":[{"name":"pooler-ci-3","seconds":40}],"seconds":45,"ok":true}\n',
    ),
    commit: 'abc',
    date: '2026-12-04T00:00:00Z',
    machine: '2 cores',
  });
  assert.match(table, /Total: \*\*1140 s\*\* \(19\.0 min\) against a limit of 25 min: under\./);
  assert.ok(table.indexOf('test/b.test.ts') < table.indexOf('test/a.test.ts'), 'slowest first');
  assert.match(table, /\| 1 \| first pass \| test\/b\.test\.ts \| 90\.5 \| 7 \| 1 \|/);
  assert.match(table, /- second pass: no timings were written/);
  assert.match(table, /- first pass \(v24\.1\.0\): 2 files, 13 tests, 690 s wall/);
  assert.match(table, /4 of those tests were declared in test\/x\/suite\.ts/);
  assert.doesNotMatch(table, /\| test\/x\/suite\.ts \|/, 'no row for a module that is not a test file');
  assert.match(table, /\| 1 \| `npx tsx test\/faults\/run\.ts --profile ci --seed 1` \| ci-1 60 \| 80 \| yes \|/);
  assert.match(table, /\| 2 \| `npx tsx test\/faults\/run\.ts --profile multi-ci --seed 2` \| multi-ci-2 50 \| 55 \| no \|/);
  assert.match(table, /about its longest lane: lane 1 125 s, lane 2 55 s\./);
  assert.match(renderTable({ phases: parsePhases('x\t1600\n'), passes: [], faults: null, commit: 'c', date: 'd', machine: 'm' }), /: \*\*over\*\*\./);
  assert.throws(() => parsePhases('npm ci\tabc\n'), /bad phase line/);
});

test('a phase line with /proc/stat ticks (busy, all) shows how busy the cores were; a line without them shows nothing there; impossible ticks are refused', () => {
  const phases = parsePhases('npm ci\t40\t3000\t8000\nPostgres check\t1\n');
  assert.deepEqual(phases, [{ name: 'npm ci', seconds: 40, busy: 0.375 }, { name: 'Postgres check', seconds: 1 }]);
  const table = renderTable({ phases, passes: [], faults: null, commit: 'c', date: 'd', machine: 'm' });
  assert.match(table, /\| npm ci \| 40 \| 98 % \| 38 % \|/);
  assert.match(table, /\| Postgres check \| 1 \| 2 % \|  \|/);
  assert.throws(() => parsePhases('npm ci\t40\t9000\t8000\n'), /bad phase line/);
  assert.throws(() => parsePhases('npm ci\t40\tx\t8000\n'), /bad phase line/);
});

test('docs/ci-times.md, the committed table, states its total against the limit and names every test file of the tree, and only those', () => {
  const text = readFileSync('docs/ci-times.md', 'utf8');
  const total = Number(/^Total: \*\*(\d+) s\*\*/m.exec(text)?.[1]);
  assert.ok(Number.isFinite(total) && total > 0, 'the table states its total');
  // Under or over, as the run was: the table reports the limit, it does not hide a miss.
  assert.match(text, new RegExp(`against a limit of ${CI_LIMIT_SECONDS / 60} min: ${total < CI_LIMIT_SECONDS ? 'under' : '\\*\\*over\\*\\*'}\\.`));
  const files = [...text.matchAll(/^\| \d+ \| [a-z ]+ \| (test\/\S+\.test\.ts) \|/gm)].map((m) => m[1]!);
  assert.ok(files.length > 0, 'the table lists test files');
  for (const f of files) assert.ok(existsSync(f), `${f} in docs/ci-times.md no longer exists`);
  // Each test file of the first pass is in the table: a table from an older tree would miss new ones.
  const all = [...readdirSync('test').filter((f) => f.endsWith('.test.ts')).map((f) => `test/${f}`), ...readdirSync('test/unit').filter((f) => f.endsWith('.test.ts')).map((f) => `test/unit/${f}`)];
  const missing = all.filter((f) => !files.includes(f));
  assert.deepEqual(missing, [], 'test files without a time in docs/ci-times.md: run .ci/run and commit .cache/ci-times.md there');
});

test('local Kafka JIT: tiered (the JVM default) unless OUTBOX_KAFKA_JIT=quick; another value is refused, naming the variable', () => {
  assert.equal(kafkaJit({}), 'tiered');
  assert.deepEqual(kafkaJitFlags({}), []);
  assert.deepEqual(kafkaJitFlags({ OUTBOX_KAFKA_JIT: 'tiered' }), []);
  assert.deepEqual(kafkaJitFlags({ OUTBOX_KAFKA_JIT: 'quick' }), ['-XX:TieredStopAtLevel=1']);
  assert.throws(() => kafkaJit({ OUTBOX_KAFKA_JIT: 'c1' }), /^Error: OUTBOX_KAFKA_JIT: "c1" is not one of tiered, quick$/);
});

test('local Kafka JIT: the tests, CI and the fault suite run quick brokers; the bench keeps the default', () => {
  const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
  assert.match(pkg.scripts.test!, /&& OUTBOX_KAFKA_JIT=quick scripts\/with-kafka\.sh node /);
  assert.doesNotMatch(pkg.scripts.bench!, /OUTBOX_KAFKA_JIT/);
  assert.match(readFileSync('.ci/run', 'utf8'), /^export OUTBOX_KAFKA_JIT=quick$/m);
  assert.match(readFileSync('test/faults/ci.ts', 'utf8'), /OUTBOX_KAFKA_JIT: process\.env\.OUTBOX_KAFKA_JIT \|\| 'quick'/);
});
