/**
 * The benchmark suite (issue 7): one command, real servers, one run, one table.
 *
 *   npm run bench                 # full profile (~35 minutes on the 2-core machine)
 *   npm run bench -- --quick      # small sizes, for trying things (~7 minutes)
 *   npm run bench -- --only consumer,peer
 *   npm run bench -- --only idle  # the idle relay alone (~3 minutes)
 *   npm run bench -- --quick --out /tmp/bench   # results and summary in /tmp/bench, not bench/results/<stamp>/ and bench/committed/
 *
 * This file only reads the arguments and runs the selected sections in order: each section
 * is a module of bench/sections/ returning its table rows; bench/harness.ts runs them and
 * checks that every selected one (with those it needs: drain needs ceilings) ran and gave
 * figures, else the run exits 1 naming them; bench/report.ts prints the table and writes
 * results.json and the plots (bench/results/, ignored); bench/summary.ts writes the run's
 * small summary into bench/committed/ (committed: README and docs quote runs only from
 * there, through `npm run bench:tables`).
 *
 * This machine is shared: every comparison is measured side by side in this run, arms
 * alternating where they repeat.
 */
import { runSections, type Section } from './harness.js';
import { PROFILES } from './profile.js';
import { resultsDir } from './report.js';
import { SUMMARY_DIR } from './summary.js';
import { ceilings } from './sections/ceilings.js';
import { consumer } from './sections/consumer.js';
import { cost } from './sections/cost.js';
import { drain } from './sections/drain.js';
import { latency } from './sections/latency.js';
import { peer } from './sections/peer.js';
import { scale } from './sections/scale.js';
import { stampede } from './sections/stampede.js';
import { relayCost } from './sections/relayCost.js';
import { debezium } from './sections/debezium.js';
import { multiOutbox } from './sections/multiOutbox.js';
import { retention } from './sections/retention.js';
import { pooler } from './sections/pooler.js';
import { effects } from './sections/effects.js';
import { consoleSection } from './sections/console.js';
import { exactlyOnce } from './sections/exactlyOnce.js';
import { HELD_SYSTEM_KEYS, heldHorizon, type HeldSystemKey } from './sections/heldHorizon.js';
import { idle } from './sections/idle.js';
import { tenants } from './sections/tenants.js';
import { encodings } from './sections/encodings.js';

const SECTIONS = ['ceilings', 'drain', 'latency', 'consumer', 'scale', 'peer', 'cost', 'stampede', 'relaycost', 'debezium', 'multioutbox', 'retention', 'pooler', 'effects', 'console', 'exactlyonce', 'idle', 'heldhorizon', 'tenants', 'encodings'] as const;
type SectionName = (typeof SECTIONS)[number];

function usage(problem: string): never {
  process.stderr.write(`bench: ${problem}\nusage: bench/run.ts [--quick] [--only ${SECTIONS.join(',')}] [--out DIR] [--held-hold-seconds N] [--held-systems ${HELD_SYSTEM_KEYS.join(',')}] [--eo-rounds N]\n`);
  process.exit(2);
}

interface Args {
  quick: boolean;
  only?: SectionName[];
  outDir?: string;
  heldHoldSeconds?: number;
  heldSystems?: HeldSystemKey[];
  exactlyOnceRounds?: number;
}

function parseArgs(argv: string[]): Args {
  const out: Args = { quick: false };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i]!.split(/=(.*)/s, 2) as [string, string | undefined];
    const value = (): string => inline ?? argv[++i] ?? usage(`${flag} needs a value`);
    if (flag === '--quick') out.quick = true;
    else if (flag === '--only') {
      const names = value().split(',').filter(Boolean);
      const unknown = names.filter((n) => !(SECTIONS as readonly string[]).includes(n));
      if (names.length === 0 || unknown.length > 0) usage(`--only: unknown section ${unknown.join(', ') || '(none given)'}`);
      out.only = names as SectionName[];
    } else if (flag === '--out') out.outDir = value();
    else if (flag === '--held-hold-seconds') {
      // Section 18's holds are 30 minutes each in the full profile (three holds, four systems: over six hours); a shorter run says so in its summary's sizes.
      const n = Number(value());
      if (!Number.isInteger(n) || n < 5 || n > 7_200) usage(`--held-hold-seconds: an integer from 5 to 7200 (got ${argv[i]})`);
      out.heldHoldSeconds = n;
    } else if (flag === '--held-systems') {
      // Section 18 one system at a time (a 30-minute profile is over 90 minutes per system); the summary records which ran, and the section fails unless exactly those did.
      const keys = value().split(',').filter(Boolean);
      const unknown = keys.filter((k) => !(HELD_SYSTEM_KEYS as readonly string[]).includes(k));
      if (keys.length === 0 || unknown.length > 0 || new Set(keys).size !== keys.length) usage(`--held-systems: some of ${HELD_SYSTEM_KEYS.join(', ')}, each once (got ${keys.join(',') || 'none'})`);
      out.heldSystems = keys as HeldSystemKey[];
    } else if (flag === '--eo-rounds') {
      // Section 16 with more rounds than the profile's: on a 3-node cluster sharing two cores, one round's ratios move more than their gap to the targets; the medians of several settle them. The summary's sizes record it.
      const n = Number(value());
      if (!Number.isInteger(n) || n < 1 || n > 20) usage(`--eo-rounds: an integer from 1 to 20 (got ${argv[i]})`);
      out.exactlyOnceRounds = n;
    }
    else usage(`unknown argument ${argv[i]}`);
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
const profile = args.quick ? 'quick' : 'full';
const P = {
  ...PROFILES[profile],
  ...(args.heldHoldSeconds !== undefined && { heldHoldSeconds: args.heldHoldSeconds }),
  ...(args.exactlyOnceRounds !== undefined && { exactlyOnceRounds: args.exactlyOnceRounds }),
};

/** Ceiling 1 (the raw producer's rows/s), for the drain section's ratios. */
let ceiling1 = NaN;

const sections: Array<Section & { name: SectionName; needs?: SectionName[] }> = [
  {
    name: 'ceilings',
    title: '1. ceilings',
    run: async (pool) => {
      const r = await ceilings(pool, { rows: P.drainRows });
      ceiling1 = r.data.kafkaProducer;
      return r;
    },
  },
  { name: 'drain', title: '2. relay drain', needs: ['ceilings'], run: (pool) => drain(pool, { rows: P.drainRows, ceiling: ceiling1, compare: [{ batchSize: 1000 }] }) },
  {
    name: 'latency',
    title: '3. latency',
    // The relay alone first (as deployed with the consumer on another server), then with our
    // consumer on this same Postgres: its transactions hold the relay's horizon back.
    run: (pool) => latency(pool, { seconds: P.latencySeconds, arms: [{ rate: 1_000, withConsumer: false }, { rate: 1_000, withConsumer: true }, { rate: 5_000, withConsumer: true }] }),
  },
  {
    name: 'consumer',
    title: '4. consumer',
    run: (pool) =>
      consumer(pool, {
        messages: P.consumerMessages,
        partitions: 4,
        rounds: P.consumerRounds,
        arms: [
          { key: 'ours', label: 'consumer, dedup + one-row effect (defaults: 100/transaction, savepoints on failure)', savepoints: 'on-failure' },
          { key: 'savepoint per message (before)', label: 'before: a savepoint per message, 50/transaction', savepoints: 'always', messagesPerTransaction: 50 },
        ],
      }),
  },
  { name: 'scale', title: '5. scale', run: (pool) => scale(pool, { rows: P.scaleRows, rounds: P.scaleRounds, backlogs: { small: P.smallBacklog, big: P.bigBacklog } }) },
  { name: 'peer', title: '6. peer', run: (pool) => peer(pool, { rows: P.peerRows, seconds: P.peerSeconds }) },
  { name: 'cost', title: '7. cost to the application', run: (pool) => cost(pool, { seconds: P.pgbenchSeconds, rounds: P.pgbenchRounds }) },
  // N readers of a hot key at the moment it expires: the cache helper against a naive cache-aside (needs Redis: 6379, or a private redis-server).
  { name: 'stampede', title: '8. cache stampede', run: (pool) => stampede(pool, { readers: args.quick ? 200 : 1_000, workers: 4, rounds: args.quick ? 3 : 10, loaderMs: 20 }) },
  // Drains side by side (mark, never analyzed, held snapshot, delete) with CPU per row of relay, backends and broker; an idle relay.
  { name: 'relaycost', title: '9. cost per row', run: (pool) => relayCost(pool, { rows: P.drainRows, idleSeconds: args.quick ? 5 : 10, steadySeconds: args.quick ? 20 : 60 }) },
  // Debezium embedded (Postgres connector + outbox EventRouter) against the relay, side by side: drain, steady load, idle.
  { name: 'debezium', title: '10. vs Debezium', run: (pool) => debezium(pool, { quick: args.quick }) },
  // N outboxes drained by one relay process against N relay processes (N = 4).
  { name: 'multioutbox', title: '11. many outboxes', run: (pool) => multiOutbox(pool, { quick: args.quick }) },
  // Sustained load with mark + cleanup, delete mode and partition retention, and the writers alone, one after another on a private cluster.
  { name: 'retention', title: '12. retention', run: (pool) => retention(pool, { rate: P.retentionRate, seconds: P.retentionSeconds, quick: args.quick }) },
  // The relay direct against through PgBouncer in transaction pooling (pooler: 'transaction'): drain rows/s, Postgres CPU per row, pick-up latency.
  { name: 'pooler', title: '13. pooled mode', run: (pool) => pooler(pool, { rows: P.poolerRows, rounds: P.poolerRounds, pickUpSeconds: P.poolerPickUpSeconds }) },
  // The effect guard's cost per effect on Redis and on Postgres against an unguarded no-op effect: one at a time, a duplicate, 32 at a time with CPU.
  { name: 'effects', title: '14. effect guard', run: (pool) => effects(pool, { effects: P.effects, rounds: P.effectsRounds }) },
  // The console's reads on 10,000,000 outbox rows and 1,000,000 dead letters (built in a private schema), each ~50 times: p95 < 200 ms.
  { name: 'console', title: '15. console', run: (pool) => consoleSection(pool, { outboxRows: P.consoleOutboxRows, deadLetters: P.consoleDeadLetters, repeats: P.consoleRepeats, heavy: { deadLetters: P.consoleHeavyDeadLetters, heavyRows: P.consoleHeavyRows, repeats: P.consoleRepeats } }) },
  // delivery: 'exactly-once' against at-least-once on kafkajs and at the defaults (platformatic), side by side: drain rows/s and relay CPU per row; commit → ack at 500 and 1,000 rows/s, relay alone (p50 within the interval + 20 ms, p99 at most 2 x); commit → fetched by a read_committed reader at 1,000.
  {
    name: 'exactlyonce',
    title: '16. exactly-once',
    run: (pool) => exactlyOnce(pool, { rows: P.exactlyOnceRows, rounds: P.exactlyOnceRounds, rates: [500, 1_000], latencySeconds: P.exactlyOnceLatencySeconds }),
  },
  // Section 9's idle arm alone, in rounds: the idle relay's CPU and its pick-up (issue 34 item 7).
  { name: 'idle', title: '17. idle relay', run: (pool) => idle(pool, { seconds: 10, rounds: args.quick ? 1 : 3 }) },
  // A long transaction elsewhere (three kinds of hold) under steady load, on a private cluster with PgQue's autovacuum settings: the relay in three modes beside a plain SKIP LOCKED queue.
  {
    name: 'heldhorizon',
    title: '18. held horizon',
    run: (pool) =>
      heldHorizon(pool, {
        rate: P.heldRate,
        cleanSeconds: P.heldCleanSeconds,
        holdSeconds: P.heldHoldSeconds,
        ...(args.heldSystems && { systems: args.heldSystems }),
        afterSeconds: P.heldAfterSeconds,
        // A partition per 10 s (quick) or minute of the offered load: several drop behind each clean phase.
        partitionSizeIds: P.heldRate * (args.quick ? 10 : 60),
        partitionMaintenanceIntervalMs: args.quick ? 2_000 : 10_000,
        partitionRetention: args.quick ? '5s' : '30s',
      }),
  },
  // issue 37: 1,000 idle schema tenants (CPU, connections), a row in any of them, one tenant's backlog beside the others' rows, 200 tenant databases with 20 busy: `outbox-relay run --tenant-…` at its defaults.
  {
    name: 'tenants',
    title: '19. many tenants',
    run: (pool) =>
      tenants(pool, {
        idleTenants: P.tenantSchemas,
        idleSeconds: P.tenantIdleSeconds,
        rowRate: P.tenantRowRate,
        latencySeconds: P.tenantLatencySeconds,
        backlogRows: P.tenantBacklogRows,
        databases: P.tenantDatabases,
        busyDatabases: P.tenantBusyDatabases,
        busyRate: P.tenantBusyRate,
        busySeconds: P.tenantBusySeconds,
      }),
  },
  // issue 38: Avro through a real registry against JSON, drains side by side at defaults: rows/s and relay CPU per row (Avro at most 1.3 x).
  { name: 'encodings', title: '20. encodings', run: (pool) => encodings(pool, { rows: P.encodingRows, rounds: P.encodingRounds }) },
];

// Every name --only accepts has its section, once: a full run runs all of them (and the
// harness fails a run in which a selected one did not complete or a row is labelled other
// than its arms ran).
const listed = sections.map((s) => s.name);
const unlisted = SECTIONS.filter((n) => listed.filter((l) => l === n).length !== 1);
if (unlisted.length > 0 || listed.length !== SECTIONS.length) usage(`the section list and SECTIONS differ (${unlisted.join(', ') || 'extra entries'})`);

// The selected sections and those they need, in the order of the list.
const selected = new Set<SectionName>(args.only ?? SECTIONS);
for (const s of [...sections].reverse()) if (selected.has(s.name)) for (const n of s.needs ?? []) selected.add(n);

process.exitCode = await runSections({
  name: `outbox-relay benchmark, ${profile} profile`,
  outDir: args.outDir ?? resultsDir(args.quick ? 'quick' : undefined),
  facts: { profile, sizes: P },
  // With --out (a trial elsewhere), the summary goes there too, not into bench/committed/.
  summary: { dir: args.outDir ?? SUMMARY_DIR, profile, sizes: P },
  sections: sections.filter((s) => selected.has(s.name)),
});
