/**
 * The fault-injection suite: proves, by running it, that the relay and the consumer
 * runtime lose nothing, apply nothing twice and reorder no key under faults.
 *
 *   tsx test/faults/run.ts --profile smoke|ci|long [--seed N] [--rows N] [--relays N]
 *                          [--plant dedup-off|horizon-off] [--verify-planted] [--no-snapshot]
 *
 * It starts a Postgres instance and a Kafka broker of its own (never the shared ones),
 * concurrent writers, relay processes and consumer processes; injects faults on a seeded
 * schedule; waits for everything to drain; then an independent checker reads the topic
 * from the beginning, the effects table and the outbox table. docs/faults.md has the
 * method and the results.
 *
 * Exit code 0 when lost, rolled-back delivered, duplicate effects and reorderings are all
 * 0 and everything drained (and, with --verify-planted, when each planted bug was caught);
 * 1 otherwise.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { startLocalKafka, type LocalKafka } from '../../scripts/localKafka.js';
import { startLocalPostgres, destroyLocalPostgresSync, type LocalPostgres } from '../../scripts/localPostgres.js';
import { waitFor } from '../helpers/wait.js';
import { buildSchedule, describeFault, Random, type Fault, type FaultCounts } from './schedule.js';
import { startWorkload, type WorkloadStats } from './workload.js';
import { check, readEffects, readOutbox, readWholeTopic, violations, type CheckResult, type Delivered } from './checker.js';
import { killAllChildren, Slot } from './processes.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RESULTS = join(ROOT, 'bench/results');
/** Where the relays and consumers run from: a snapshot of the tree taken at start (others
 *  edit the shared working tree meanwhile), or the tree itself with --no-snapshot. */
let CODE = ROOT;

/** Copy the code under test to /tmp so that edits made during a run do not reach it. */
function snapshotCode(): string {
  const dir = mkdtempSync('/tmp/outbox-faults-code-');
  for (const entry of ['src', 'sql', 'scripts', 'test', 'package.json', 'tsconfig.json']) {
    cpSync(join(ROOT, entry), join(dir, entry), { recursive: true });
  }
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  return dir;
}

/** Migrate `schema` with the CLI of the code under test. */
function migrateSchema(url: string, schema: string): void {
  execFileSync(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'migrate'], {
    cwd: CODE,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: url, OUTBOX_SCHEMA: schema, OUTBOX_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

type Plant = 'none' | 'dedup-off' | 'horizon-off';

interface Profile {
  rows: number;
  /** The writers spread the rows over this long; faults happen meanwhile. */
  writeMs: number;
  writers: number;
  keys: number;
  hotKeys: number;
  hotShare: number;
  maxRowsPerTransaction: number;
  holdChance: number;
  holdMinMs: number;
  holdMaxMs: number;
  rollbackChance: number;
  relays: number;
  consumers: number;
  partitions: number;
  leaseTtlMs: number;
  batchSize: number;
  counts: FaultCounts;
  /** Bound on the wait for everything to drain after the writers and faults are done. */
  drainTimeoutMs: number;
}

const BASE: Omit<Profile, 'rows' | 'writeMs' | 'counts' | 'drainTimeoutMs'> = {
  writers: 8,
  keys: 400,
  hotKeys: 8,
  hotShare: 0.25,
  maxRowsPerTransaction: 4,
  holdChance: 0.15,
  holdMinMs: 50,
  holdMaxMs: 500,
  rollbackChance: 0.08,
  relays: 3,
  consumers: 2,
  partitions: 6,
  leaseTtlMs: 2_500,
  batchSize: 200,
};

const PROFILES: Record<string, Profile> = {
  // One fault of each kind, for trying the harness out.
  smoke: {
    ...BASE,
    rows: 1_500,
    writeMs: 20_000,
    relays: 2,
    counts: { relayKills: 1, relayPauses: 1, brokerRestarts: 1, postgresRestarts: 1, consumerKills: 1, consumerJoins: 1 },
    drainTimeoutMs: 60_000,
  },
  ci: {
    ...BASE,
    rows: 6_000,
    writeMs: 50_000,
    relays: 2,
    counts: { relayKills: 5, relayPauses: 2, brokerRestarts: 1, postgresRestarts: 1, consumerKills: 3, consumerJoins: 1 },
    drainTimeoutMs: 90_000,
  },
  long: {
    ...BASE,
    rows: 100_000,
    writeMs: 330_000,
    keys: 5_000,
    hotKeys: 16,
    hotShare: 0.15,
    partitions: 12,
    counts: { relayKills: 20, relayPauses: 5, brokerRestarts: 3, postgresRestarts: 2, consumerKills: 10, consumerJoins: 4 },
    drainTimeoutMs: 300_000,
  },
};

/** The short runs that must catch a planted bug. */
const PLANTED: Record<Exclude<Plant, 'none'>, Partial<Profile>> = {
  // Redeliveries come from relays killed between the send and the mark, and from
  // consumers killed or rebalanced between their commit and the offset commit.
  'dedup-off': {
    rows: 2_500,
    writeMs: 22_000,
    counts: { relayKills: 4, relayPauses: 0, brokerRestarts: 0, postgresRestarts: 0, consumerKills: 3, consumerJoins: 2 },
    drainTimeoutMs: 60_000,
  },
  // Reorderings need nothing but the held-open transactions of shared keys.
  'horizon-off': {
    rows: 2_500,
    writeMs: 15_000,
    counts: { relayKills: 0, relayPauses: 0, brokerRestarts: 0, postgresRestarts: 0, consumerKills: 0, consumerJoins: 0 },
    drainTimeoutMs: 60_000,
  },
};

interface Args {
  profile: string;
  seed: number;
  rows?: number;
  relays?: number;
  plant: Plant;
  verifyPlanted: boolean;
  snapshot: boolean;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { profile: 'ci', seed: Math.floor(Math.random() * 2 ** 31), plant: 'none', verifyPlanted: false, snapshot: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) usage(`${a} needs a value`);
      return v as string;
    };
    if (a === '--profile') args.profile = value();
    else if (a === '--seed') args.seed = Number(value());
    else if (a === '--rows') args.rows = Number(value());
    else if (a === '--relays') args.relays = Number(value());
    else if (a === '--plant') args.plant = value() as Plant;
    else if (a === '--verify-planted') args.verifyPlanted = true;
    else if (a === '--no-snapshot') args.snapshot = false;
    else usage(`unknown argument ${a}`);
  }
  if (!PROFILES[args.profile]) usage(`unknown profile ${args.profile}`);
  if (!['none', 'dedup-off', 'horizon-off'].includes(args.plant)) usage(`unknown plant ${args.plant}`);
  if (!Number.isSafeInteger(args.seed) || args.seed < 0) usage('--seed must be a non-negative integer');
  if (args.rows !== undefined && !(args.rows > 0)) usage('--rows must be positive');
  if (args.relays !== undefined && !(args.relays >= 1 && args.relays <= 8)) usage('--relays must be 1-8');
  return args;
}

function usage(problem: string): never {
  process.stderr.write(
    `faults: ${problem}\nusage: tsx test/faults/run.ts --profile smoke|ci|long [--seed N] [--rows N] [--relays N] [--plant dedup-off|horizon-off] [--verify-planted] [--no-snapshot]\n`,
  );
  process.exit(2);
}

const t0 = Date.now();
function log(line: string): void {
  process.stdout.write(`faults [${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${line}\n`);
}

/** Whether the relay in this tree has shard leases (several relays keep key order). */
function relayHasLeases(): boolean {
  return readFileSync(join(CODE, 'src/relay.ts'), 'utf8').includes('OUTBOX_LEASE_TTL_MS');
}

interface Servers {
  postgres: LocalPostgres;
  kafka: LocalKafka;
}

interface RunConfig {
  name: string;
  profileName: string;
  profile: Profile;
  seed: number;
  plant: Plant;
  command: string;
}

/** The code under test: the commit, and the files of src/ and sql/ changed since it. */
let codeAtStart: { commit: string; uncommitted: string[] } | undefined;
function codeVersion(): { commit: string; uncommitted: string[] } {
  codeAtStart ??= readCodeVersion();
  return codeAtStart;
}
function readCodeVersion(): { commit: string; uncommitted: string[] } {
  try {
    const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const status = execFileSync('git', ['status', '--porcelain', '--', 'src', 'sql'], { cwd: ROOT, encoding: 'utf8' });
    return { commit, uncommitted: status.split('\n').filter(Boolean) };
  } catch {
    return { commit: 'unknown', uncommitted: [] };
  }
}

interface RunReport {
  name: string;
  code: { commit: string; uncommitted: string[] };
  profile: string;
  plant: Plant;
  seed: number;
  command: string;
  settings: Profile;
  relaysUsed: number;
  schedule: string[];
  faultsInjected: Record<string, number>;
  workload: Omit<WorkloadStats, 'committed' | 'rolledBack' | 'unknown'> & { committed: number; rolledBack: number; unknown: number };
  drained: boolean;
  /** From the end of the last fault (restart done, pause over) to every committed row applied. */
  drainAfterLastFaultMs: number | null;
  /** From the later of the last fault and the last write to every committed row applied. */
  drainAfterQuietMs: number | null;
  processes: Record<string, { starts: number; unexpectedExits: number; exitCodes: Array<number | string> }>;
  check: CheckResult;
  violations: string[];
  ok: boolean;
  wallMs: number;
  logs: string;
}

async function runOnce(servers: Servers, cfg: RunConfig): Promise<RunReport> {
  const started = Date.now();
  const p = cfg.profile;
  const leases = relayHasLeases();
  const relays = leases ? p.relays : 1;
  if (!leases && p.relays > 1) log(`src/relay.ts has no OUTBOX_LEASE_TTL_MS yet: running 1 relay instead of ${p.relays}`);
  const tag = `${cfg.seed}`.slice(0, 10);
  const schema = `faults_${cfg.plant.replace('-', '_')}_${tag}_${Date.now().toString(36)}`;
  const topic = `faults-${cfg.plant}-${tag}-${Date.now().toString(36)}`;
  const group = `faults-consumers-${tag}-${Date.now().toString(36)}`;
  const logs = join(RESULTS, `faults-${cfg.name}.logs`);
  rmSync(logs, { recursive: true, force: true });
  mkdirSync(logs, { recursive: true });
  const url = servers.postgres.url;
  const brokers = [servers.kafka.brokers];

  log(`run ${cfg.name}: seed ${cfg.seed}, ${p.rows} rows, ${p.writers} writers, ${p.keys} keys (+${p.hotKeys} hot), ${relays} relay(s), ${p.consumers} consumers, ${p.partitions} partitions`);
  log(`reproduce: ${cfg.command}`);

  migrateSchema(url, schema);
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  await pool.query(`
    CREATE TABLE "${schema}".effects (
      seq        bigserial   PRIMARY KEY,
      message_id uuid,
      key        text        NOT NULL,
      outbox_id  bigint      NOT NULL,
      consumer   text        NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    -- Not unique, on purpose: a message applied twice shows as two rows.
    CREATE INDEX effects_message_id_idx ON "${schema}".effects (message_id)`);
  const admin = new Kafka({ clientId: 'faults-admin', brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: p.partitions, replicationFactor: 1 }], waitForLeaders: true });
  await admin.disconnect();

  const faults = buildSchedule({
    seed: cfg.seed,
    counts: p.counts,
    startMs: 3_000,
    endMs: Math.max(4_000, p.writeMs - 3_000),
    relays,
    consumers: p.consumers,
    leaseTtlMs: p.leaseTtlMs,
  });
  const schedule = faults.map(describeFault);
  log(`fault schedule (${faults.length} faults):`);
  for (const line of schedule) log(`  ${line}`);
  writeFileSync(join(logs, 'schedule.txt'), schedule.join('\n') + '\n');

  const relayEnv = (i: number): Record<string, string | undefined> => ({
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATABASE_URL: url,
    KAFKA_BROKERS: brokers.join(','),
    OUTBOX_SCHEMA: schema,
    OUTBOX_LOG_LEVEL: 'warn',
    OUTBOX_CLIENT_ID: `faults-relay-${i}`,
    OUTBOX_METRICS_ADDRESS: '127.0.0.1:0', // several relays on one host: any free port
    OUTBOX_BATCH_SIZE: String(p.batchSize),
    OUTBOX_RETRY_MAX_DELAY_MS: '2000',
    OUTBOX_SHUTDOWN_TIMEOUT_MS: '5000',
    ...(leases ? { OUTBOX_LEASE_TTL_MS: String(p.leaseTtlMs) } : {}),
    ...(cfg.plant === 'horizon-off' ? { OUTBOX_HORIZON_MAX_WAIT_MS: '0' } : {}),
  });
  const consumerEnv = (name: string): Record<string, string | undefined> => ({
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATABASE_URL: url,
    KAFKA_BROKERS: brokers.join(','),
    OUTBOX_SCHEMA: schema,
    GROUP_ID: group,
    TOPICS: topic,
    CONSUMER_NAME: name,
    ...(cfg.plant === 'dedup-off' ? { FAULTS_DEDUP: 'off' } : {}),
  });
  const slotLog = (line: string): void => log(line);
  const relaySlots = Array.from(
    { length: relays },
    (_, i) =>
      new Slot({
        name: `relay ${i}`,
        args: ['src/cli.ts', 'run'],
        cwd: CODE,
        env: relayEnv(i),
        logFile: join(logs, `relay-${i}.log`),
        restartDelayMs: 1_000,
        maxUnexpectedExits: 100,
        log: slotLog,
      }),
  );
  const makeConsumer = (name: string): Slot =>
    new Slot({
      name,
      args: ['test/faults/consumerProcess.ts'],
      cwd: CODE,
      env: consumerEnv(name),
      logFile: join(logs, `${name}.log`),
      restartDelayMs: 1_000,
      maxUnexpectedExits: 100,
      log: slotLog,
      onReport: (r) => {
        if (r.event === 'start-failed') log(`${name}: start failed: ${String(r.error)}`);
      },
    });
  const consumerSlots = Array.from({ length: p.consumers }, (_, i) => makeConsumer(`consumer-${i}`));
  const extraSlots: Slot[] = [];
  const allSlots = (): Slot[] => [...relaySlots, ...consumerSlots, ...extraSlots];
  const injected: Record<string, number> = {};
  let lastFaultEndAt = Date.now();
  let workloadStats: WorkloadStats | undefined;
  let drainedAt: number | undefined;
  let quietAt = Date.now();

  try {
    for (const s of relaySlots) s.start();
    for (const s of consumerSlots) s.start();

    const workload = startWorkload({
      databaseUrl: url,
      schema,
      topic,
      rows: p.rows,
      writers: p.writers,
      keys: p.keys,
      hotKeys: p.hotKeys,
      hotShare: p.hotShare,
      maxRowsPerTransaction: p.maxRowsPerTransaction,
      holdChance: p.holdChance,
      holdMinMs: p.holdMinMs,
      holdMaxMs: p.holdMaxMs,
      rollbackChance: p.rollbackChance,
      durationMs: p.writeMs,
      deadlineMs: p.writeMs * 3 + 60_000,
      random: new Random(cfg.seed ^ 0x5eed),
      log,
    });
    workloadStats = workload.stats;
    const workStart = Date.now();
    const progress = setInterval(() => {
      const s = workload.stats;
      log(`writers: ${s.committed.length} committed, ${s.rolledBack.length} rolled back, ${s.unknown.length} unknown; ${s.reconnects} reconnects`);
    }, 15_000);

    // Infrastructure restarts never overlap each other.
    let infra: Promise<void> = Promise.resolve();
    const exclusiveInfra = (fn: () => Promise<void>): Promise<void> => {
      const result = infra.then(fn);
      infra = result.catch(() => undefined);
      return result;
    };
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
    const inject = async (f: Fault): Promise<void> => {
      await sleep(Math.max(0, workStart + f.atMs - Date.now()));
      const mark = (): void => {
        injected[f.kind] = (injected[f.kind] ?? 0) + 1;
      };
      switch (f.kind) {
        case 'relay-kill': {
          const slot = relaySlots[f.relay] as Slot;
          await slot.exclusive(async () => {
            log(`FAULT relay ${f.relay}: SIGKILL (restart in ${f.downMs} ms)`);
            await slot.kill();
            mark();
            await sleep(f.downMs);
            slot.start();
          });
          break;
        }
        case 'relay-pause': {
          const slot = relaySlots[f.relay] as Slot;
          await slot.exclusive(async () => {
            await waitFor(`relay ${f.relay} running`, () => slot.state === 'running', { timeoutMs: 30_000, intervalMs: 50 }).catch(() => undefined);
            log(`FAULT relay ${f.relay}: SIGSTOP for ${f.pauseMs} ms`);
            slot.pause();
            mark();
            await sleep(f.pauseMs);
            slot.resume();
            log(`relay ${f.relay}: SIGCONT`);
          });
          break;
        }
        case 'broker-restart':
          await exclusiveInfra(async () => {
            log('FAULT Kafka broker: restart');
            const t = Date.now();
            await servers.kafka.restart();
            mark();
            log(`Kafka broker back after ${Date.now() - t} ms`);
          });
          break;
        case 'postgres-restart':
          await exclusiveInfra(async () => {
            log(`FAULT Postgres: restart (${f.mode})`);
            const t = Date.now();
            await servers.postgres.restart(f.mode);
            mark();
            log(`Postgres back after ${Date.now() - t} ms`);
          });
          break;
        case 'consumer-kill': {
          const slot = consumerSlots[f.consumer] as Slot;
          await slot.exclusive(async () => {
            if (f.moment === 'after-db-commit') {
              await waitFor(`consumer ${f.consumer} started`, () => slot.ready, { timeoutMs: 30_000, intervalMs: 50 }).catch(() => undefined);
              log(`FAULT consumer ${f.consumer}: SIGKILL at its next Postgres commit, before the offset commit (restart in ${f.downMs} ms)`);
              const byItself = await slot.signalAndAwaitExit('SIGUSR2', 10_000);
              if (!byItself) log(`consumer ${f.consumer}: no commit within 10 s; SIGKILLed anyway`);
            } else {
              log(`FAULT consumer ${f.consumer}: SIGKILL (restart in ${f.downMs} ms)`);
              await slot.kill();
            }
            mark();
            await sleep(f.downMs);
            slot.start();
          });
          break;
        }
        case 'consumer-join': {
          const slot = makeConsumer(`consumer-extra-${extraSlots.length}`);
          extraSlots.push(slot);
          log(`FAULT ${slot.o.name}: joins the group for ${f.stayMs} ms`);
          slot.start();
          mark();
          await sleep(f.stayMs);
          log(`${slot.o.name}: leaves the group (SIGTERM)`);
          await slot.stop(20_000);
          break;
        }
      }
      lastFaultEndAt = Math.max(lastFaultEndAt, Date.now());
    };
    const faultsDone = Promise.all(faults.map((f) => inject(f).catch((error: unknown) => log(`fault ${describeFault(f)} failed: ${(error as Error).message}`))));

    await workload.done;
    log(`writers done: ${workload.stats.committed.length} committed, ${workload.stats.rolledBack.length} rolled back, ${workload.stats.unknown.length} unknown outcome`);
    await faultsDone;
    clearInterval(progress);
    log('all faults injected and recovered from; waiting for the drain');
    quietAt = Math.max(lastFaultEndAt, workload.stats.lastWriteAt);

    // Drained: every committed row is marked sent and has at least one effect.
    try {
      await waitFor(
        'every committed row sent and applied',
        async () => {
          const { rows } = await pool.query<{ unsent: number; unapplied: number }>(`
            SELECT (SELECT count(*) FROM "${schema}".outbox WHERE sent_at IS NULL)::int AS unsent,
                   (SELECT count(*) FROM "${schema}".outbox o
                     WHERE NOT EXISTS (SELECT 1 FROM "${schema}".effects e WHERE e.message_id = o.message_id))::int AS unapplied`);
          const r = rows[0];
          return r !== undefined && r.unsent === 0 && r.unapplied === 0;
        },
        { timeoutMs: p.drainTimeoutMs, intervalMs: 200 },
      );
      drainedAt = Date.now();
      log(`drained ${drainedAt - quietAt} ms after the last fault or write`);
    } catch (error) {
      log(`NOT DRAINED: ${(error as Error).message}`);
    }
  } finally {
    await Promise.all(allSlots().map((s) => s.stop(15_000)));
  }

  log('checker: reading the topic from the beginning, the effects and the outbox');
  let delivered: Delivered[];
  try {
    delivered = await readWholeTopic(brokers, topic, 180_000);
  } catch (error) {
    log(`checker could not read the topic: ${(error as Error).message}`);
    delivered = [];
  }
  const outbox = await readOutbox(pool, schema);
  const effects = await readEffects(pool, schema);
  await pool.end();
  const ws = workloadStats as WorkloadStats;
  const result = check({ delivered, outbox, effects, writers: { committed: ws.committed, rolledBack: ws.rolledBack, unknown: ws.unknown } });
  const found = violations(result);
  if (drainedAt === undefined) found.push('not drained');
  const { committed, rolledBack, unknown, ...workloadRest } = ws;
  const processes: RunReport['processes'] = {};
  for (const s of allSlots()) processes[s.o.name] = { starts: s.starts, unexpectedExits: s.unexpectedExits, exitCodes: s.exitCodes };
  return {
    name: cfg.name,
    code: codeVersion(),
    profile: cfg.profileName,
    plant: cfg.plant,
    seed: cfg.seed,
    command: cfg.command,
    settings: p,
    relaysUsed: relays,
    schedule,
    faultsInjected: injected,
    workload: { ...workloadRest, committed: committed.length, rolledBack: rolledBack.length, unknown: unknown.length },
    drained: drainedAt !== undefined,
    drainAfterLastFaultMs: drainedAt === undefined ? null : drainedAt - lastFaultEndAt,
    drainAfterQuietMs: drainedAt === undefined ? null : drainedAt - quietAt,
    processes,
    check: result,
    violations: found,
    ok: found.length === 0,
    wallMs: Date.now() - started,
    logs,
  };
}

function printReport(r: RunReport): void {
  const c = r.check;
  const rows: Array<[string, string | number]> = [
    ['seed', r.seed],
    ['code', `${r.code.commit.slice(0, 12)}${r.code.uncommitted.length ? ` + ${r.code.uncommitted.length} uncommitted src/sql files` : ''}`],
    ['plant', r.plant],
    ['relays / consumers / partitions', `${r.relaysUsed} / ${r.settings.consumers} / ${r.settings.partitions}`],
    ['faults injected', Object.entries(r.faultsInjected).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'],
    ['transactions (writers)', r.workload.transactions],
    ['rows committed (outbox table)', c.committedRows],
    ['rows rolled back (writers)', c.rolledBackRows],
    ['unknown-outcome rows: committed / absent', `${c.unknownCommitted} / ${c.unknownAbsent}`],
    ['messages on the wire', c.wireMessages],
    ['LOST (committed, never delivered)', c.lost],
    ['ROLLED-BACK DELIVERED', c.rolledBackDelivered],
    ['wire duplicates', c.wireDuplicates],
    ['DUPLICATE EFFECTS', c.duplicateEffects],
    ['MISSING EFFECTS', c.missingEffects],
    ['PER-KEY REORDERINGS (wire, first delivery)', c.reorderings],
    ['effect reorderings (informational)', c.effectReorderings],
    ['committed by writer but not in table', c.committedMissingInDb],
    ['malformed / keys split over partitions', `${c.malformed} / ${c.keysSplit}`],
    ['drained', r.drained ? 'yes' : 'NO'],
    ['drain after last fault (ms)', r.drainAfterLastFaultMs ?? '-'],
    ['drain after last fault or write (ms)', r.drainAfterQuietMs ?? '-'],
    ['process restarts after unexpected exits', Object.values(r.processes).reduce((n, x) => n + x.unexpectedExits, 0)],
    ['wall time (s)', (r.wallMs / 1000).toFixed(1)],
    ['verdict', r.ok ? 'PASS' : `FAIL: ${r.violations.join(', ')}`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(`\n=== fault run ${r.name} ===\n`);
  for (const [k, v] of rows) process.stdout.write(`  ${k.padEnd(width)}  ${v}\n`);
  for (const [kind, list] of Object.entries(c.examples)) {
    process.stdout.write(`  examples of ${kind}:\n`);
    for (const e of list) process.stdout.write(`    ${JSON.stringify(e)}\n`);
  }
  process.stdout.write(`  reproduce: ${r.command}\n  logs: ${r.logs}\n\n`);
}

function saveReport(r: RunReport): string {
  mkdirSync(RESULTS, { recursive: true });
  const file = join(RESULTS, `faults-${r.name}.json`);
  writeFileSync(file, JSON.stringify(r, null, 2) + '\n');
  return file;
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const base = PROFILES[args.profile] as Profile;
  const profile: Profile = { ...base, ...(args.rows ? { rows: args.rows } : {}), ...(args.relays ? { relays: args.relays } : {}) };
  const overrides = `${args.rows ? ` --rows ${args.rows}` : ''}${args.relays ? ` --relays ${args.relays}` : ''}`;
  const command = `npx tsx test/faults/run.ts --profile ${args.profile} --seed ${args.seed}${overrides}`;

  // Everything we start is stopped on the way out, whatever the way.
  let postgres: LocalPostgres | undefined;
  let kafka: LocalKafka | undefined;
  codeVersion();
  if (args.snapshot) CODE = snapshotCode();
  const emergencyCleanup = (): void => {
    killAllChildren();
    if (CODE !== ROOT) rmSync(CODE, { recursive: true, force: true });
    if (postgres) destroyLocalPostgresSync(postgres.dir);
    if (kafka) {
      try {
        const pid = Number(readFileSync(join(kafka.dir, 'broker.pid'), 'utf8'));
        if (pid) process.kill(pid, 'SIGKILL');
      } catch {
        // not running
      }
      rmSync(kafka.dir, { recursive: true, force: true });
    }
  };
  process.on('exit', emergencyCleanup);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      log(`${signal}: cleaning up`);
      emergencyCleanup();
      process.exit(1);
    });
  }

  const runs: RunConfig[] = [];
  if (args.plant !== 'none') {
    runs.push({
      name: `${args.profile}-${args.seed}-${args.plant}`,
      profileName: args.profile,
      profile: { ...profile, ...PLANTED[args.plant], ...(args.rows ? { rows: args.rows } : {}) },
      seed: args.seed,
      plant: args.plant,
      command: `npx tsx test/faults/run.ts --profile ${args.profile} --seed ${args.seed} --plant ${args.plant}${overrides}`,
    });
  } else {
    runs.push({ name: `${args.profile}-${args.seed}`, profileName: args.profile, profile, seed: args.seed, plant: 'none', command });
    if (args.verifyPlanted) {
      for (const plant of ['dedup-off', 'horizon-off'] as const) {
        runs.push({
          name: `${args.profile}-${args.seed}-${plant}`,
          profileName: args.profile,
          profile: { ...profile, ...PLANTED[plant] },
          seed: args.seed,
          plant,
          command: `npx tsx test/faults/run.ts --profile ${args.profile} --seed ${args.seed} --plant ${plant}${args.relays ? ` --relays ${args.relays}` : ''}`,
        });
      }
    }
  }

  const reports: RunReport[] = [];
  try {
    log('starting a Postgres instance and a Kafka broker of our own');
    [postgres, kafka] = await Promise.all([startLocalPostgres(), startLocalKafka({ dir: join(ROOT, '.cache/kafka/run', `faults-${process.pid}`) })]);
    log(`Postgres ${postgres.url} (${postgres.dir}), Kafka ${kafka.brokers}; code under test: ${CODE}`);
    for (const cfg of runs) {
      const report = await runOnce({ postgres, kafka }, cfg);
      reports.push(report);
      printReport(report);
      log(`results: ${saveReport(report)}`);
    }
  } finally {
    killAllChildren();
    await kafka?.destroy().catch(() => undefined);
    await postgres?.destroy().catch(() => undefined);
    kafka = undefined;
    postgres = undefined;
  }

  // A planted run passes when the checker catches its bug.
  let ok = true;
  process.stdout.write('=== summary ===\n');
  for (const r of reports) {
    let pass: boolean;
    let what: string;
    if (r.plant === 'none') {
      pass = r.ok;
      what = r.ok ? 'no violations' : r.violations.join(', ');
    } else if (r.plant === 'dedup-off') {
      pass = r.check.duplicateEffects > 0;
      what = `duplicate effects caught: ${r.check.duplicateEffects}`;
    } else {
      pass = r.check.reorderings > 0;
      what = `reorderings caught: ${r.check.reorderings}`;
    }
    // A lone planted run is itself a failing system: exit 1 when the violation shows.
    if (args.plant !== 'none') pass = r.ok;
    ok &&= pass;
    process.stdout.write(`  ${pass ? 'PASS' : 'FAIL'}  ${r.name}: ${what}  (${(r.wallMs / 1000).toFixed(0)} s)\n`);
  }
  process.stdout.write(`  seed ${args.seed}; reproduce: ${runs[0]?.command}\n  total wall time ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
  return ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`faults: ${(error as Error)?.stack ?? String(error)}\n`);
    process.exit(1);
  },
);
