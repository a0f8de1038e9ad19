/**
 * One fault run: a fresh schema and topic on the suite's servers, the profile's relays and
 * consumers (exactly as many as it says), the writers, the seeded faults (inject.ts), the
 * drain, the independent checker (checker.ts), and the self-check of what actually ran
 * (selfCheck.ts). Returns the report; never decides what to run from the code under test.
 */
import '../../src/shared/kafkajsIdleFix.js';
import { consumerBundle, relayCliBundle } from './cliBundle.js';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { waitFor } from '../helpers/wait.js';
import { check, readEffects, readOutbox, readWholeTopic, violations, type Delivered } from './checker.js';
import { readCommittedWithKafka } from '../helpers/committedReader.js';
import { Injector } from './inject.js';
import { injectedDetails } from './injectedDetails.js';
import { logWhereLostRowsAre } from './lostRows.js';
import { log } from './log.js';
import { Slot } from './processes.js';
import type { RunConfig } from './profiles.js';
import { RESULTS, type RunReport } from './report.js';
import { buildSchedule, describeFault, Random, type FaultKind } from './schedule.js';
import { emptyTally, expectedTally, FAULT_KINDS, rowsOvershoot, selfCheck, selfCheckFailures } from './selfCheck.js';
import type { Servers } from './servers.js';
import { PoolerSightings, RelaySightings, relayClientId } from './sightings.js';
import { migrateSchema, type CodeVersion } from './snapshot.js';
import { mergeStats, startWorkload, type Workload, type WorkloadStats } from './workload.js';

export interface RunContext {
  servers: Servers;
  /** Where the relays and consumers run from (a snapshot, or the tree itself). */
  codeDir: string;
  code: CodeVersion;
}

export async function runOnce(ctx: RunContext, cfg: RunConfig): Promise<RunReport> {
  const started = Date.now();
  const p = cfg.profile;
  const tag = `${cfg.seed}`.slice(0, 10);
  const schema = `faults_${cfg.plant.replace('-', '_')}_${tag}_${Date.now().toString(36)}`;
  const topic = `faults-${cfg.plant}-${tag}-${Date.now().toString(36)}`;
  const group = `faults-consumers-${tag}-${Date.now().toString(36)}`;
  const logs = join(RESULTS, `faults-${cfg.name}.logs`);
  rmSync(logs, { recursive: true, force: true });
  mkdirSync(logs, { recursive: true });
  const { servers, codeDir } = ctx;
  const url = servers.postgres.url;
  const bouncer = p.pooler ? servers.pgbouncer : undefined;
  if (p.pooler && !bouncer) throw new Error(`profile ${cfg.profileName} runs through PgBouncer, and the servers have none`);
  // What the application side connects to: PgBouncer's address for the same database in
  // the pooler profiles. The harness's own reads and the migration go direct.
  const appUrlOf = (u: string): string => {
    if (!bouncer) return u;
    const via = new URL(bouncer.url());
    via.pathname = new URL(u).pathname;
    return via.toString();
  };
  const brokers = servers.kafka.brokers.split(',');
  // Outbox 0 is the run's schema in the server's database (the consumers' tables live there
  // too); outbox i >= 1 (multi-outbox profiles) a schema of the same name in a database of
  // its own on the same server, with its own topic and writers, so a fault can cut it off.
  const outboxes = Array.from({ length: p.outboxes ?? 1 }, (_, i) => {
    if (i === 0) return { name: 'o0', url, appUrl: appUrlOf(url), topic, database: undefined as string | undefined };
    const database = `${schema}_db${i}`;
    const u = new URL(url);
    u.pathname = `/${database}`;
    return { name: `o${i}`, url: u.toString(), appUrl: appUrlOf(u.toString()), topic: `${topic}-o${i}`, database };
  });
  const topics = outboxes.map((o) => o.topic);

  log(`run ${cfg.name}: seed ${cfg.seed}, ${p.rows} rows, ${p.writers} writers, ${p.keys} keys (+${p.hotKeys} hot), ${p.relays} relays, ${p.consumers} consumers, ${p.partitions} partitions${outboxes.length > 1 ? `, ${outboxes.length} outboxes per relay` : ''}`);
  log(`reproduce: ${cfg.command}`);
  if (bouncer) log(`relays, consumers and writers through PgBouncer ${appUrlOf(url)} (${p.pooler} pooling); the harness's own reads direct`);

  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  for (const o of outboxes) {
    if (o.database) await pool.query(`CREATE DATABASE "${o.database}"`);
    migrateSchema(codeDir, o.url, schema);
  }
  const outboxPools = outboxes.map((o, i) => {
    if (i === 0) return pool;
    const other = new pg.Pool({ connectionString: o.url, max: 4 });
    other.on('error', () => undefined);
    return other;
  });
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
  // The cluster's own answer, not our configuration's, for the self-check.
  const brokersInCluster = (await admin.describeCluster()).brokers.length;
  // On a cluster, every partition on 3 replicas (min.insync.replicas=2 from the brokers).
  await admin.createTopics({ topics: topics.map((t) => ({ topic: t, numPartitions: p.partitions, replicationFactor: Math.min(3, p.brokers) })), waitForLeaders: false });
  // Every broker must know it, every partition led and fully replicated: a node that has
  // not caught up on the metadata yet answers UNKNOWN_TOPIC_OR_PARTITION meanwhile.
  for (const t of topics) {
    await waitFor(
      `topic ${t} led and in sync on every partition`,
      async () => {
        const md = await admin.fetchTopicMetadata({ topics: [t] }).catch(() => undefined);
        const parts = md?.topics[0]?.partitions ?? [];
        return parts.length === p.partitions && parts.every((x) => x.leader >= 0 && x.isr.length === Math.min(3, p.brokers));
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
  }
  await admin.disconnect();

  const exactlyOnce = p.delivery === 'exactly-once';
  const faults = buildSchedule({
    seed: cfg.seed,
    counts: p.counts,
    startMs: 3_000,
    endMs: Math.max(4_000, p.writeMs - 3_000),
    relays: p.relays,
    consumers: p.consumers,
    leaseTtlMs: p.leaseTtlMs,
    brokers: p.brokers,
    partitions: p.partitions,
    outboxes: outboxes.length,
    relayKillsAfterKafkaCommit: exactlyOnce,
  });
  const schedule = faults.map(describeFault);
  log(`fault schedule (${faults.length} faults):`);
  for (const line of schedule) log(`  ${line}`);
  writeFileSync(join(logs, 'schedule.txt'), schedule.join('\n') + '\n');

  const baseEnv = { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: appUrlOf(url), KAFKA_BROKERS: brokers.join(','), OUTBOX_SCHEMA: schema };
  // Several outboxes: each relay process serves them all (OUTBOX_OUTBOXES instead of DATABASE_URL).
  const { DATABASE_URL: _url, OUTBOX_SCHEMA: _schema, ...withoutDatabase } = baseEnv;
  const relayDatabaseEnv: Record<string, string | undefined> =
    outboxes.length === 1
      ? baseEnv
      : {
          ...withoutDatabase,
          OUTBOX_OUTBOXES: outboxes.map((o) => o.name).join(','),
          ...Object.fromEntries(outboxes.flatMap((o) => [[`OUTBOX_${o.name.toUpperCase()}_DATABASE_URL`, o.appUrl], [`OUTBOX_${o.name.toUpperCase()}_SCHEMA`, schema]])),
        };
  // The producer adapters each relay slot's processes said they published through.
  const adaptersSeen = Array.from({ length: p.relays }, () => new Map<string, number>());
  // Behind PgBouncer: the processes of each slot that said they found the pooler themselves.
  const poolerDetected = Array.from({ length: p.relays }, () => 0);
  const relaysStarted = Array.from({ length: p.relays }, () => 0);
  // Processes of each slot that committed a batch claimed ahead (the relay's once-a-worker line).
  const claimedAhead = Array.from({ length: p.relays }, () => 0);
  // Processes of each slot that moved shards between their workers (src/relay/workerShards.ts).
  const handedOver = Array.from({ length: p.relays }, () => 0);
  const handedBack = Array.from({ length: p.relays }, () => 0);
  // Exactly-once profiles: relay processes that marked rows sent from a unit's progress.
  const markedFromProgress = Array.from({ length: p.relays }, () => 0);
  // Exactly-once profiles: what Kafka answered each stalled transaction (relayHooks.ts), by pid.
  const stallReports = new Map<number, { openMs: number; error: string }>();
  // Exactly-once: one transactional-id prefix for every relay of the run, taken once. Taken
  // per slot (as it was), two slots built a millisecond apart got two prefixes: the relays
  // then neither fenced each other nor read each other's progress, and a batch one of them
  // committed to Kafka but not to Postgres went out again from the other (finding 6).
  const transactionalIdPrefix = `faults-${tag}-${Date.now().toString(36)}`;
  // The prefixes the relay processes reported (`transactionalIds` of their Kafka checks line).
  const prefixesSeen = new Set<string>();
  const relaySlots = Array.from(
    { length: p.relays },
    (_, i) =>
      new Slot({
        name: `relay ${i}`,
        // Exactly-once: the preload that kills at a Kafka commit, and plants the bug, patches
        // the source modules: tsx and src/cli.ts. Otherwise the bundle (./cliBundle.ts).
        args: exactlyOnce ? ['--import', './test/faults/relayHooks.ts', 'src/cli.ts', 'run'] : [relayCliBundle(codeDir), 'run'],
        tsx: exactlyOnce,
        cwd: codeDir,
        env: {
          ...relayDatabaseEnv,
          // info: the adapter's own "producer adapter publishing" line (once per process),
          // the self-check's evidence of what published; info is a few lines a process.
          OUTBOX_LOG_LEVEL: 'info',
          OUTBOX_PRODUCER: cfg.producer,
          OUTBOX_CLIENT_ID: relayClientId(i),
          OUTBOX_METRICS_ADDRESS: '127.0.0.1:0', // several relays on one host: any free port
          OUTBOX_BATCH_SIZE: String(p.batchSize),
          OUTBOX_RETRY_MAX_DELAY_MS: '2000',
          OUTBOX_SHUTDOWN_TIMEOUT_MS: '5000',
          OUTBOX_LEASE_TTL_MS: String(p.leaseTtlMs),
          // Both ways of running behind the pooler: told (even slots) and detected (odd).
          ...(bouncer ? { OUTBOX_POOLER: relayPooler(i) } : {}),
          ...(cfg.plant === 'horizon-off' ? { OUTBOX_HORIZON_MAX_WAIT_MS: '0' } : {}),
          ...(exactlyOnce ? { OUTBOX_DELIVERY: 'exactly-once', OUTBOX_TRANSACTIONAL_ID_PREFIX: transactionalIdPrefix } : {}),
          ...(cfg.plant === 'progress-off' ? { FAULTS_PROGRESS: 'off' } : {}),
          ...(p.transactionTimeoutMs ? { OUTBOX_TRANSACTION_TIMEOUT_MS: String(p.transactionTimeoutMs) } : {}),
          ...(p.relayStallMs ? { FAULTS_STALL_MS: String(p.relayStallMs) } : {}),
        },
        logFile: join(logs, `relay-${i}.log`),
        restartDelayMs: 1_000,
        maxUnexpectedExits: 100,
        log,
        onReport: (line) => {
          if (line.msg === 'producer adapter publishing' && typeof line.producer === 'string') {
            adaptersSeen[i]!.set(line.producer, (adaptersSeen[i]!.get(line.producer) ?? 0) + 1);
          }
          if (typeof line.msg === 'string' && /transaction-pooling proxy/.test(line.msg) && line.level !== 50) poolerDetected[i]!++;
          if (line.msg === 'relay started') relaysStarted[i]!++;
          if (line.msg === 'exactly-once delivery: Kafka checks passed' && typeof line.transactionalIds === 'string') prefixesSeen.add(line.transactionalIds.replace(/\.[^.]*\.unit-\*$/, ''));
          if (line.event === 'stall-refused') stallReports.set(Number(line.pid), { openMs: Number(line.openMs), error: String(line.error) });
          if (typeof line.msg === 'string' && line.msg.startsWith('exactly-once unit started: rows its last Kafka transaction published were still unsent')) markedFromProgress[i]!++;
          if (typeof line.msg === 'string' && line.msg.startsWith('claiming ahead:')) claimedAhead[i]!++;
          if (typeof line.msg === 'string' && line.msg.startsWith('shards handed to worker 0:')) handedOver[i]!++;
          if (typeof line.msg === 'string' && line.msg.startsWith('shards handed back:')) handedBack[i]!++;
        },
      }),
  );
  const makeConsumer = (name: string): Slot =>
    new Slot({
      name,
      args: [consumerBundle(codeDir)],
      tsx: false,
      cwd: codeDir,
      env: { ...baseEnv, GROUP_ID: group, TOPICS: topics.join(','), CONSUMER_NAME: name, ...(cfg.plant === 'dedup-off' ? { FAULTS_DEDUP: 'off' } : {}) },
      logFile: join(logs, `${name}.log`),
      restartDelayMs: 1_000,
      maxUnexpectedExits: 100,
      log,
      onReport: (r) => {
        if (r.event === 'start-failed') log(`${name}: start failed: ${String(r.error)}`);
      },
    });
  const consumerSlots = Array.from({ length: p.consumers }, (_, i) => makeConsumer(`consumer-${i}`));
  const extraSlots: Slot[] = [];
  const allSlots = (): Slot[] => [...relaySlots, ...consumerSlots, ...extraSlots];
  // Set once the writers start; the injector nudges rows in through them (Workload.nudge).
  let workloads: Workload[] = [];
  const injector = new Injector({
    nudgeIdleWriters: async () => {
      // Eight keys a transaction: with the shards split between relays, one of them lands
      // on the armed relay but for a chance in 2^8 per relay pair, and the nudges repeat.
      await Promise.all(workloads.filter((w) => Date.now() - w.stats.lastWriteAt > 1_000).map((w) => w.nudge(8)));
    },
    servers,
    relays: relaySlots,
    consumers: consumerSlots,
    extraConsumer: () => {
      const slot = makeConsumer(`consumer-extra-${extraSlots.length}`);
      extraSlots.push(slot);
      return slot;
    },
    log,
    topic,
    relayPublished: (i) => (adaptersSeen[i]?.size ?? 0) > 0,
    stallReports,
    cutDatabase: async (i, cut) => {
      const database = outboxes[i]?.database;
      if (!database) throw new Error(`outbox ${i} has no database of its own`);
      await pool.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS ${cut ? 'false' : 'true'}`);
      if (cut) await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [database]);
    },
  });
  // One per outbox: a relay counts as run when seen heartbeating in every outbox.
  const sightings = outboxPools.map((op) => new RelaySightings(op, schema, p.relays));
  const consumerName = (i: number): string => `consumer-${i}`;
  const poolerSightings = bouncer
    ? new PoolerSightings(bouncer, pool, [
        ...relaySlots.map((s, i) => ({ name: s.o.name, applicationName: relayClientId(i) })),
        ...consumerSlots.map((s, i) => ({ name: s.o.name, applicationName: `faults-${consumerName(i)}` })),
      ])
    : undefined;
  let workloadStats: WorkloadStats | undefined;
  let drainedAt: number | undefined;
  let quietAt = Date.now();

  try {
    for (const s of relaySlots) s.start();
    for (const s of consumerSlots) s.start();
    for (const r of sightings) r.start();
    poolerSightings?.start();

    // One workload per outbox, the rows and writers shared out; keys prefixed per outbox
    // so no key is in two outboxes (the checker judges each key's order on its own).
    workloads = outboxes.map((o, i) => startWorkload({
      databaseUrl: o.appUrl,
      schema,
      topic: o.topic,
      rows: Math.ceil(p.rows / outboxes.length),
      writers: Math.max(1, Math.floor(p.writers / outboxes.length)),
      keyPrefix: outboxes.length > 1 ? `${o.name}-` : undefined,
      unnamedWriters: bouncer !== undefined,
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
      random: new Random((cfg.seed ^ 0x5eed) + i),
      log,
    }));
    const merged = (): WorkloadStats => mergeStats(workloads.map((w) => w.stats));
    const progress = setInterval(() => {
      const s = merged();
      log(`writers: ${s.committed.length} committed, ${s.rolledBack.length} rolled back, ${s.unknown.length} unknown; ${s.reconnects} reconnects`);
    }, 15_000);
    const faultsDone = injector.runSchedule(faults, Date.now());

    await Promise.all(workloads.map((w) => w.done));
    workloadStats = merged();
    log(`writers done: ${workloadStats.committed.length} committed, ${workloadStats.rolledBack.length} rolled back, ${workloadStats.unknown.length} unknown outcome`);
    await faultsDone;
    // Again: faults after the writers may have nudged rows in (Workload.nudge).
    workloadStats = merged();
    clearInterval(progress);
    log('all faults injected and recovered from; waiting for the drain');
    quietAt = Math.max(injector.lastFaultEndAt, workloadStats.lastWriteAt);

    // Drained: every committed row is marked sent and has at least one effect.
    try {
      await waitFor(
        'every committed row sent and applied',
        async () => {
          // The effects are in outbox 0's database: the other outboxes' rows are looked up by id.
          for (const op of outboxPools) {
            const { rows } = await op.query<{ message_id: string; sent: boolean }>(`SELECT message_id, sent_at IS NOT NULL AS sent FROM "${schema}".outbox`);
            if (rows.some((r) => !r.sent)) return false;
            const { rows: applied } = await pool.query<{ n: number }>(
              `SELECT count(DISTINCT message_id)::int AS n FROM "${schema}".effects WHERE message_id = ANY($1::uuid[])`,
              [rows.map((r) => r.message_id)],
            );
            if (applied[0]!.n !== rows.length) return false;
          }
          return true;
        },
        { timeoutMs: p.drainTimeoutMs, intervalMs: 200 },
      );
      drainedAt = Date.now();
      log(`drained ${drainedAt - quietAt} ms after the last fault or write`);
    } catch (error) {
      log(`NOT DRAINED: ${(error as Error).message}`);
    }
  } finally {
    for (const r of sightings) await r.stop();
    await poolerSightings?.stop();
    await injector.close();
    await Promise.all(allSlots().map((s) => s.stop(15_000)));
  }

  log('checker: reading the topic from the beginning, the effects and the outbox');
  let delivered: Delivered[];
  try {
    delivered = [];
    // Exactly-once: what a read_committed reader of Kafka's own client gets (kafkajs'
    // filter lets records of aborted transactions through: test/helpers/committedReader.ts).
    for (const t of topics) delivered.push(...(exactlyOnce ? await readCommittedWithKafka(t, { brokers, timeoutMs: 180_000 }) : await readWholeTopic(brokers, t, 180_000)));
  } catch (error) {
    log(`checker could not read the topic: ${(error as Error).message}`);
    delivered = [];
  }
  const outbox = (await Promise.all(outboxPools.map((op) => readOutbox(op, schema)))).flat();
  const effects = await readEffects(pool, schema);
  for (const op of outboxPools.slice(1)) await op.end();
  for (const o of outboxes) if (o.database) await pool.query(`DROP DATABASE IF EXISTS "${o.database}" WITH (FORCE)`).catch(() => undefined);
  await pool.end();
  const ws = workloadStats as WorkloadStats;
  const result = check({ delivered, outbox, effects, writers: { committed: ws.committed, rolledBack: ws.rolledBack, unknown: ws.unknown } });

  // The self-check: what ran, counted from what we started and saw, against the profile.
  const actual = emptyTally();
  actual.relays = relaySlots.filter((s, i) => s.starts > 0 && sightings.every((r) => r.seen.has(relayClientId(i)))).length;
  actual.relaysLiveAtOnce = Math.min(...sightings.map((r) => r.maxLiveAtOnce));
  actual.outboxes = sightings.filter((r) => r.seen.size === p.relays).length;
  actual.relaysOnProducer = adaptersSeen.filter((seen) => seen.size === 1 && seen.has(cfg.producer)).length;
  actual.transactionalIdPrefixes = prefixesSeen.size;
  actual.relaysClaimingAhead = claimedAhead.filter((n) => n > 0).length;
  actual.relaysMovingShards = handedOver.filter((n, i) => n > 0 && handedBack[i]! > 0).length;
  actual.consumers = consumerSlots.filter((s) => (s.events.started ?? 0) > 0 && (s.events.assigned ?? 0) > 0).length;
  actual.brokers = brokersInCluster;
  actual.rowsCommitted = ws.committed.length - ws.nudged;
  actual.relayKillsAfterKafkaCommit = injector.relayWorstMomentKills;
  actual.relaysMarkingFromProgress = markedFromProgress.reduce((a, b) => a + b, 0);
  for (const { kind } of FAULT_KINDS) actual.faults[kind] = injector.injected[kind] ?? 0;
  if (poolerSightings) {
    actual.relaysThroughPooler = poolerSightings.seenInTransactionPools(relaySlots.map((s) => s.o.name)).length;
    actual.consumersThroughPooler = poolerSightings.seenInTransactionPools(consumerSlots.map((s) => s.o.name)).length;
    actual.directBackends = poolerSightings.direct.size;
  }
  const seenAs = (slots: readonly Slot[]): string | undefined =>
    poolerSightings &&
    `PgBouncer's SHOW CLIENTS, sampled ${poolerSightings.samples} times: ${slots.map((s) => `${s.o.name} ${poolerSightings.throughTransactionPool.get(s.o.name) ?? 0}x in a transaction pool${poolerSightings.otherModes.has(s.o.name) ? `, in ${[...poolerSightings.otherModes.get(s.o.name)!].join('/')} pools too` : ''}`).join(', ')}`;
  // A planted run is short and may make no backlog: the pipeline is required of the real runs.
  const expected = { ...expectedTally(p), ...(cfg.plant === 'none' ? {} : { relaysClaimingAhead: 0, relaysMarkingFromProgress: 0 }) };
  const lines = selfCheck(expected, actual, {
    relays: `started ${relaySlots.reduce((n, s) => n + s.starts, 0)} times; seen heartbeating in outbox_relays${sightings.length > 1 ? ' of every outbox' : ''}: ${sightings.map((r) => [...r.seen].sort().join(', ') || 'none').join(' | ')}`,
    outboxes: sightings.map((r, i) => `${outboxes[i]!.name}: ${r.seen.size} relays`).join(', '),
    relaysLiveAtOnce: `sampled every ${RelaySightings.intervalMs} ms`,
    relaysOnProducer: `${cfg.producer}; each slot's processes reported ${adaptersSeen.map((seen, i) => `relay ${i}: ${[...seen].map(([a, n]) => `${a} x${n}`).join(', ') || 'none'}`).join('; ')}`,
    transactionalIdPrefixes: exactlyOnce ? `reported by the relay processes: ${[...prefixesSeen].join(', ') || 'none'}` : undefined,
    relaysClaimingAhead: `relay slots whose processes logged 'claiming ahead' (a batch claimed while the previous one was published): ${claimedAhead.map((n, i) => `relay ${i}: ${n}`).join(', ')}`,
    relaysMovingShards: `relay slots whose processes logged both 'shards handed to worker 0' (a trickle) and 'shards handed back' (a backlog): ${handedOver.map((n, i) => `relay ${i}: ${n} / ${handedBack[i]}`).join(', ')}`,
    consumers: 'reported themselves started and were assigned partitions',
    ...injectedDetails(injector, { exactlyOnce, transactionTimeoutMs: p.transactionTimeoutMs }),
    brokers: `describeCluster at the start of the run${ctx.servers.cluster ? `; nodes ${ctx.servers.cluster.nodes.map((n) => n.id).join(", ")}` : ""}`,
    relayKillsAfterKafkaCommit: exactlyOnce ? 'the relay process SIGKILLed itself at a Kafka commit after SIGUSR2 (test/faults/relayHooks.ts)' : undefined,
    relaysMarkingFromProgress: exactlyOnce ? `processes of each slot that logged marking rows sent from a unit's progress: ${markedFromProgress.map((n, i) => `relay ${i}: ${n}`).join(', ')}` : undefined,
    'consumer-join': 'counted once the joining consumer was assigned partitions',
    'database-cut': outboxes.length > 1 ? `of ${outboxes.slice(1).map((o) => o.database).join(', ')}` : undefined,
    relaysThroughPooler: seenAs(relaySlots) && `${seenAs(relaySlots)}; OUTBOX_POOLER ${relaySlots.map((s, i) => `${s.o.name} ${relayPooler(i)}${relayPooler(i) === 'auto' ? ` (found the pooler itself in ${poolerDetected[i]} of the ${relaysStarted[i]} processes that got as far as 'relay started', of ${s.starts} started)` : ''}`).join(', ')}`,
    consumersThroughPooler: seenAs(consumerSlots),
    directBackends: poolerSightings && `${poolerSightings.backendsSeen.size} backends of faults- processes seen in pg_stat_activity; not one of PgBouncer's server connections (SHOW SERVERS remote_pid) in two samples in a row: ${[...poolerSightings.direct.values()].slice(0, 5).join(', ') || 'none'}${poolerSightings.direct.size > 5 ? ` and ${poolerSightings.direct.size - 5} more` : ''}`,
    rowsCommitted: `seen to commit by the writers (${ws.unknown.length} of unknown outcome not counted; ${ws.nudged} nudged in for armed relay kills after the writers were idle, not counted); the last transactions may add up to ${rowsOvershoot(p)}`,
  } satisfies Partial<Record<FaultKind | Exclude<keyof typeof actual, 'faults'>, string | undefined>>, rowsOvershoot(p));

  if (exactlyOnce && result.lost > 0) await logWhereLostRowsAre(topic, brokers, result, log);
  const found = violations(result);
  // Exactly once on the wire: the reader gets each row once.
  if (exactlyOnce && result.wireDuplicates > 0) found.push(`wireDuplicates=${result.wireDuplicates}`);
  if (drainedAt === undefined) found.push('not drained');
  found.push(...selfCheckFailures(lines));
  const { committed, rolledBack, unknown, ...workloadRest } = ws;
  const processes: RunReport['processes'] = {};
  for (const s of allSlots()) processes[s.o.name] = { starts: s.starts, unexpectedExits: s.unexpectedExits, exitCodes: s.exitCodes };
  return {
    name: cfg.name,
    code: ctx.code,
    profile: cfg.profileName,
    plant: cfg.plant,
    producer: cfg.producer,
    seed: cfg.seed,
    command: cfg.command,
    settings: p,
    selfCheck: lines,
    schedule,
    faultsInjected: injector.injected,
    faultsFailed: injector.failed,
    brokerKills: injector.brokerKills,
    ...(bouncer ? { pgbouncerRestarts: injector.pgbouncerRestarts } : {}),
    workload: { ...workloadRest, committed: committed.length, rolledBack: rolledBack.length, unknown: unknown.length },
    drained: drainedAt !== undefined,
    drainAfterLastFaultMs: drainedAt === undefined ? null : drainedAt - injector.lastFaultEndAt,
    drainAfterQuietMs: drainedAt === undefined ? null : drainedAt - quietAt,
    processes,
    check: result,
    violations: found,
    ok: found.length === 0,
    wallMs: Date.now() - started,
    logs,
  };
}

/** The relays' pooler setting behind PgBouncer: both ways, told and detected. */
function relayPooler(i: number): 'transaction' | 'auto' {
  return i % 2 === 0 ? 'transaction' : 'auto';
}
