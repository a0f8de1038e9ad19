// The producer-adapter matrix (and the Node version CI claims), enforced by the harness: preloaded into every test process
// (package.json's test scripts: node --import ./test/helpers/adapterGuard.mjs) and, through
// NODE_OPTIONS, into every process those start. Every relay announces its producer adapter
// on a diagnostics channel when it starts (src/shared/diagnostics.ts); a relay on another
// adapter than OUTBOX_TEST_PRODUCER means a test ignored the setting, so that test's run
// would not test what the matrix claims. Such a process exits non-zero, and so does every
// guarded ancestor: a relay process spawned by a test reports into its parent's directory,
// and the parent fails at exit even if the test itself passed.
//
// Plain JavaScript: it must load before any TypeScript loader is registered.
import diagnosticsChannel from 'node:diagnostics_channel';
import { randomUUID } from 'node:crypto';
import { appendFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const CHANNEL = 'outbox-relay:relay-started';
const REPORTS_ENV = 'OUTBOX_TEST_ADAPTER_REPORTS';
const ADAPTERS = ['kafkajs', 'platformatic'];

// Unset, the product's own default adapter (src/relay/options.ts; this file cannot import
// TypeScript, so test/unit/testAdapterDefault.test.ts pins the two together).
const PRODUCT_DEFAULT = 'platformatic';
const raw = (process.env.OUTBOX_TEST_PRODUCER ?? '').trim();
const expected = raw === '' ? PRODUCT_DEFAULT : raw;
if (!ADAPTERS.includes(expected)) {
  process.stderr.write(`adapter guard: OUTBOX_TEST_PRODUCER=${JSON.stringify(raw)} is not one of ${ADAPTERS.join(', ')}\n`);
  process.exit(2);
}
// CI names the Node major it claims to test (.ci/run): every test process checks it runs on it.
const nodeMajor = (process.env.OUTBOX_TEST_NODE_MAJOR ?? '').trim();
if (nodeMajor !== '' && process.versions.node.split('.')[0] !== nodeMajor) {
  process.stderr.write(`test harness: OUTBOX_TEST_NODE_MAJOR=${nodeMajor}, but this process (${process.execPath}) is Node ${process.versions.node}\n`);
  process.exit(2);
}
// Children inherit the adapter under test even when the variable was unset.
process.env.OUTBOX_TEST_PRODUCER = expected;

const parentReports = process.env[REPORTS_ENV];
// Created only when a descendant has something to report.
const ownReports = join(tmpdir(), `adapter-guard-${process.pid}-${randomUUID()}`);
process.env[REPORTS_ENV] = ownReports;

const self = fileURLToPath(import.meta.url);
const importSelf = `--import ${JSON.stringify(self)}`;
const nodeOptions = process.env.NODE_OPTIONS ?? '';
if (!nodeOptions.includes(self)) process.env.NODE_OPTIONS = `${nodeOptions} ${importSelf}`.trim();

// Which test file this process works for: the file node --test started it for, inherited
// by every process it starts. With OUTBOX_TEST_RELAY_LOG set, each relay start appends
// that file's name to the log: CI's second pass runs again exactly the files whose tests
// started a relay in the first (.ci/run, scripts/relay-test-files.ts), an observation of
// what ran, not a guess from reading the sources.
const FILE_ENV = 'OUTBOX_TEST_FILE';
const RELAY_LOG_ENV = 'OUTBOX_TEST_RELAY_LOG';
const root = fileURLToPath(new URL('../..', import.meta.url));
// node --test runs each file in a process of its own, marked with NODE_TEST_CONTEXT.
if (!process.env[FILE_ENV] && process.env.NODE_TEST_CONTEXT && process.argv[1]) process.env[FILE_ENV] = relative(root, process.argv[1]);

const where = `pid ${process.pid} (${process.argv.slice(1).join(' ')})`;
let violations = 0;

diagnosticsChannel.subscribe(CHANNEL, (message) => {
  const producer = message?.producer;
  const relayLog = process.env[RELAY_LOG_ENV];
  if (relayLog) {
    const file = process.env[FILE_ENV];
    try {
      // One short line per write: appends of this size do not interleave between processes.
      appendFileSync(relayLog, `${file ?? `(no test file: ${process.argv.slice(1).join(' ')})`}\n`);
    } catch (error) {
      process.stderr.write(`adapter guard: could not append to ${relayLog}: ${error}\n`);
      process.exitCode = 1;
    }
  }
  if (producer === expected) return;
  violations += 1;
  const line =
    `adapter guard: a relay on schema ${message?.schema} started on producer adapter ${producer} in ${where}, ` +
    `but OUTBOX_TEST_PRODUCER is ${expected}: the test must pass the adapter under test ` +
    `(test/helpers/producer.ts: producer: TEST_PRODUCER, or TEST_PRODUCER_ENV for a relay process)`;
  process.stderr.write(`${line}\n`);
  // At once, not at exit: tests SIGKILL relay processes.
  if (parentReports) report(parentReports, `${process.pid}-${violations}.txt`, line);
  process.exitCode = 1;
});

function report(dir, name, line) {
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, name), line);
  } catch (error) {
    process.stderr.write(`adapter guard: could not report to ${dir}: ${error}\n`);
  }
}

process.on('exit', () => {
  let reports = [];
  try {
    reports = readdirSync(ownReports).map((name) => readFileSync(join(ownReports, name), 'utf8'));
    rmSync(ownReports, { recursive: true, force: true });
  } catch {
    // No descendant reported anything (the directory was never made).
  }
  // Also over an explicit process.exit(0): the run did not test what it claims.
  if (violations > 0) process.exitCode = 1;
  if (reports.length === 0) return;
  for (const r of reports) process.stderr.write(`${r}\n  (a process started from ${where})\n`);
  if (parentReports) reports.forEach((r, i) => report(parentReports, `${process.pid}-forwarded-${i}.txt`, r));
  process.exitCode = 1;
});
