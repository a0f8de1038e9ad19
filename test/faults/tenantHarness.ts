/**
 * One run of a tenant profile (issue 37 item 7): tenant databases on the suite's Postgres
 * (tenantDatabases.ts), relay processes running the real CLI in tenant mode
 * (`run --tenant-databases '^<run>_t[0-9]+$'`, a small connection budget, a short discovery
 * interval), every tenant's writers, the seeded faults (relay kills, a tenant database cut
 * off, a tenant added and one dropped while the writers run), the drain, the checker of
 * every tenant's topic (tenantChecker.ts) and the self-check (selfCheck.ts and
 * tenantSelfCheck.ts). harness.ts runs the other profiles; the run's parts are the same.
 */
import '../../src/shared/kafkajsIdleFix.js';
import { relayCliBundle } from './cliBundle.js';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { waitFor } from '../helpers/wait.js';
import type { RunContext } from './harness.js';
import { Injector } from './inject.js';
import { injectedDetails } from './injectedDetails.js';
import { log } from './log.js';
import { Slot } from './processes.js';
import type { RunConfig } from './profiles.js';
import { RESULTS, type RunReport } from './report.js';
import { buildSchedule, describeFault } from './schedule.js';
import { emptyTally, expectedTally, FAULT_KINDS, selfCheck, selfCheckFailures } from './selfCheck.js';
import { relayClientId } from './sightings.js';
import { checkTenants, readTenantTopics, tenantViolations, type TenantMessage } from './tenantChecker.js';
import { planTenants, TenantDatabases } from './tenantDatabases.js';
import { expectedTenantTally, tenantSelfCheck, type TenantTally } from './tenantSelfCheck.js';
import { BudgetSightings } from './tenantSightings.js';
import { mergeStats, type WorkloadStats } from './workload.js';

/** The outbox's schema in every tenant database (given to the relays as --schema). */
const SCHEMA = 'faults_outbox';

export async function runTenantsOnce(ctx: RunContext, cfg: RunConfig): Promise<RunReport> {
  const started = Date.now();
  const p = cfg.profile;
  const setup = p.tenants;
  if (!setup) throw new Error(`profile ${cfg.profileName} has no tenants`);
  const tag = `${cfg.seed}`.slice(0, 10);
  // Every tenant's database and topic starts with it: the relays' rule, and the checker's topics.
  const prefix = `ft_${tag}_${Date.now().toString(36)}`;
  const logs = join(RESULTS, `faults-${cfg.name}.logs`);
  rmSync(logs, { recursive: true, force: true });
  mkdirSync(logs, { recursive: true });
  const brokers = ctx.servers.kafka.brokers.split(',');

  const drops = p.counts.tenantDrops ?? 0;
  const faults = buildSchedule({
    seed: cfg.seed,
    counts: p.counts,
    startMs: 3_000,
    endMs: Math.max(4_000, p.writeMs - 3_000),
    relays: p.relays,
    consumers: p.consumers,
    leaseTtlMs: p.leaseTtlMs,
    // Database cuts pick "outbox" 1..n-1: tenant 0 (the rule's database, which holds the
    // relays' control connections) and the dropped tenants are never cut.
    outboxes: setup.initial - drops,
    tenants: setup.initial,
  });
  const plans = planTenants(p, faults, prefix);
  const dbs = new TenantDatabases({ codeDir: ctx.codeDir, serverUrl: ctx.servers.postgres.url, schema: SCHEMA, brokers, profile: p, seed: cfg.seed, log });
  const pattern = `^${prefix}_t[0-9]+$`;
  log(`run ${cfg.name}: seed ${cfg.seed}, ${p.rows} rows, ${plans.length} tenants (${setup.initial} at the start), ${p.relays} relays in tenant mode (--tenant-databases '${pattern}', --max-database-connections ${setup.maxDatabaseConnections}), ${p.partitions} partitions`);
  for (const t of plans) log(`  tenant ${t.index}: ${t.name}, ${t.trigger ? 'insert trigger' : 'no trigger'}, ${t.rows} rows from t+${(t.fromMs / 1000).toFixed(1)}s to t+${(t.toMs / 1000).toFixed(1)}s${t.added ? ', added' : ''}${t.dropped ? ', dropped' : ''}`);
  log(`reproduce: ${cfg.command}`);
  const schedule = faults.map(describeFault);
  log(`fault schedule (${faults.length} faults):`);
  for (const l of schedule) log(`  ${l}`);
  writeFileSync(join(logs, 'schedule.txt'), schedule.join('\n') + '\n');

  for (const t of plans) if (!t.added) await dbs.create(t);
  const triggers = await dbs.triggers();
  const kafkaAdmin = new Kafka({ clientId: 'faults-admin', brokers, logLevel: logLevel.NOTHING }).admin();
  await kafkaAdmin.connect();
  const brokersInCluster = (await kafkaAdmin.describeCluster()).brokers.length;
  await kafkaAdmin.disconnect();

  // What the relay processes said, from their log lines.
  const adaptersSeen = Array.from({ length: p.relays }, () => new Map<string, number>());
  const claimedAhead = Array.from({ length: p.relays }, () => 0);
  const handedOver = Array.from({ length: p.relays }, () => 0);
  const handedBack = Array.from({ length: p.relays }, () => 0);
  const tenantsAtStart: Array<number | undefined> = Array.from({ length: p.relays }, () => undefined);
  /** When each relay process said its tenant relay had started, and its last log line (their log times), by pid. */
  const processStartedAt = new Map<number, number>();
  const lastLineAt = new Map<number, number>();
  /** Each tenant's relay started inside a relay process: which tenant, slot, pid, when. */
  const served: Array<{ tenant: string; slot: number; pid: number; at: number }> = [];
  const released: Array<{ tenant: string; slot: number; pid: number; at: number }> = [];
  const relaySlots = Array.from(
    { length: p.relays },
    (_, i) =>
      new Slot({
        name: `relay ${i}`,
        tsx: false,
        args: [relayCliBundle(ctx.codeDir), 'run', '--tenant-databases', pattern, '--schema', SCHEMA, '--discovery-interval-ms', String(setup.discoveryIntervalMs), '--max-database-connections', String(setup.maxDatabaseConnections)],
        cwd: ctx.codeDir,
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          // The rule's database is tenant 0's: its insert trigger reaches the control connection.
          DATABASE_URL: dbs.url(plans[0]!.name),
          KAFKA_BROKERS: brokers.join(','),
          OUTBOX_LOG_LEVEL: 'info',
          OUTBOX_PRODUCER: cfg.producer,
          OUTBOX_CLIENT_ID: relayClientId(i),
          OUTBOX_METRICS_ADDRESS: '127.0.0.1:0',
          OUTBOX_BATCH_SIZE: String(p.batchSize),
          OUTBOX_RETRY_MAX_DELAY_MS: '2000',
          OUTBOX_SHUTDOWN_TIMEOUT_MS: '5000',
          OUTBOX_LEASE_TTL_MS: String(p.leaseTtlMs),
        },
        logFile: join(logs, `relay-${i}.log`),
        restartDelayMs: 1_000,
        maxUnexpectedExits: 100,
        log,
        onReport: (line) => {
          const msg = typeof line.msg === 'string' ? line.msg : '';
          const at = typeof line.time === 'number' ? line.time : Date.now();
          if (typeof line.pid === 'number') lastLineAt.set(line.pid, at);
          if (msg === 'producer adapter publishing' && typeof line.producer === 'string') adaptersSeen[i]!.set(line.producer, (adaptersSeen[i]!.get(line.producer) ?? 0) + 1);
          if (msg.startsWith('claiming ahead:')) claimedAhead[i]!++;
          if (msg.startsWith('shards handed to worker 0:')) handedOver[i]!++;
          if (msg.startsWith('shards handed back:')) handedBack[i]!++;
          if (msg === 'tenant relay started') {
            tenantsAtStart[i] ??= Number(line.tenants);
            processStartedAt.set(Number(line.pid), at);
          }
          if (msg === 'relay started' && typeof line.tenant === 'string') served.push({ tenant: line.tenant, slot: i, pid: Number(line.pid), at });
          if (msg === 'tenant released: the rule no longer finds it' && typeof line.tenant === 'string') released.push({ tenant: line.tenant, slot: i, pid: Number(line.pid), at });
        },
      }),
  );
  const budget = new BudgetSightings(dbs.url('postgres'), setup.maxDatabaseConnections, () => relaySlots.map((s, i) => ({ clientId: relayClientId(i), pid: s.child?.pid, spawnedAt: s.startedAt })));
  let writersStartedAt = Date.now();
  let addStartedAt: number | undefined;
  let addReadyAt: number | undefined;
  let dropStartedAt: number | undefined;
  const injector = new Injector({
    servers: ctx.servers,
    relays: relaySlots,
    consumers: [],
    extraConsumer: () => {
      throw new Error('the tenant profiles run no consumers');
    },
    log,
    relayPublished: (i) => (adaptersSeen[i]?.size ?? 0) > 0,
    cutDatabase: (i, cut) => dbs.cut(i, cut),
    tenantFault: async (f) => {
      const plan = plans[f.tenant];
      if (!plan) throw new Error(`the run has no tenant ${f.tenant}`);
      if (f.kind === 'tenant-add') {
        // Relay faults wait meanwhile: what is shown is relays finding the tenant by
        // themselves, which relays restarted after it was made would not (they find it at start).
        await holding(relaySlots, async () => {
          const current = (): number[] => relaySlots.flatMap((s) => (s.child?.pid === undefined ? [] : [s.child.pid]));
          await waitFor('every relay process running its tenant relay', () => current().length === relaySlots.length && current().every((pid) => processStartedAt.has(pid)), { timeoutMs: 60_000, intervalMs: 50 }).catch((error: unknown) => log(`tenant ${f.tenant}: ${(error as Error).message}; added anyway`));
          log(`FAULT tenant ${f.tenant} added: ${plan.name} created, migrated${plan.trigger ? ' with its insert trigger' : ''}, its topic; then its writers`);
          addStartedAt = Date.now();
          await dbs.create(plan);
          addReadyAt = Date.now();
          dbs.startWriters(plan, Math.max(1_000, writersStartedAt + plan.toMs - Date.now()));
          log(`tenant ${f.tenant}: writing ${Date.now() - addStartedAt} ms after its database was created`);
          const foundBy = (): boolean => served.some((x) => x.tenant === plan.name && (processStartedAt.get(x.pid) ?? Infinity) < addStartedAt!);
          await waitFor(`tenant ${f.tenant} served by a relay running since before it was added`, foundBy, { timeoutMs: 30_000, intervalMs: 50 }).then(
            () => log(`tenant ${f.tenant}: served ${Date.now() - addReadyAt!} ms after it was migrated and its topic made`),
            (error: unknown) => log(`tenant ${f.tenant}: ${(error as Error).message}`),
          );
        });
      } else {
        // Relay faults wait meanwhile too, until every relay process running at the drop has
        // let the tenant go and lived on past the check's window (a discovery interval and
        // 2 s): a CI run whose random kills took both processes down in that window had no
        // process left to show the release (self-check 0 of 0).
        await holding(relaySlots, async () => {
          const current = (): number[] => relaySlots.flatMap((s) => (s.child?.pid === undefined ? [] : [s.child.pid]));
          log(`FAULT tenant ${f.tenant} dropped: waiting for its writers and its rows sent, then DROP DATABASE ${plan.name} WITH (FORCE)`);
          const t = Date.now();
          await dbs.drop(plan, () => (dropStartedAt = Date.now()));
          log(`tenant ${f.tenant}: dropped ${Date.now() - t} ms after the fault began`);
          const windowEnd = (dropStartedAt ?? Date.now()) + setup.discoveryIntervalMs + 2_000;
          const shown = (): boolean =>
            current().every((pid) => released.some((r) => r.pid === pid && r.tenant === plan.name && r.at >= dropStartedAt!) && (lastLineAt.get(pid) ?? 0) > windowEnd);
          await waitFor(`tenant ${f.tenant} released by every running relay process, each logging past the check's window`, shown, { timeoutMs: 30_000, intervalMs: 50 }).catch((error: unknown) =>
            log(`tenant ${f.tenant}: ${(error as Error).message}`),
          );
        });
      }
    },
  });

  let workloadStats: WorkloadStats | undefined;
  let drainedAt: number | undefined;
  let quietAt = Date.now();
  try {
    for (const s of relaySlots) s.start();
    budget.start();
    writersStartedAt = Date.now();
    for (const t of plans) if (!t.added) dbs.startWriters(t, t.toMs - t.fromMs);
    const merged = (): WorkloadStats => mergeStats(dbs.workloads().map((w) => w.stats));
    const progress = setInterval(() => {
      const s = merged();
      log(`writers: ${s.committed.length} committed, ${s.rolledBack.length} rolled back, ${s.unknown.length} unknown; ${s.reconnects} reconnects`);
    }, 15_000);
    await injector.runSchedule(faults, writersStartedAt);
    // The added tenant's writers exist only once its fault ran.
    await Promise.all(dbs.workloads().map((w) => w.done));
    clearInterval(progress);
    workloadStats = merged();
    log(`writers done: ${workloadStats.committed.length} committed, ${workloadStats.rolledBack.length} rolled back, ${workloadStats.unknown.length} unknown outcome`);
    quietAt = Math.max(injector.lastFaultEndAt, workloadStats.lastWriteAt);
    try {
      await waitFor('every row of every tenant sent', () => dbs.drained(), { timeoutMs: p.drainTimeoutMs, intervalMs: 200 });
      drainedAt = Date.now();
      log(`drained ${drainedAt - quietAt} ms after the last fault or write`);
    } catch (error) {
      log(`NOT DRAINED: ${(error as Error).message}`);
    }
  } finally {
    await budget.stop();
    await injector.close();
    await Promise.all(relaySlots.map((s) => s.stop(15_000)));
  }

  log("checker: reading every tenant's topic from the beginning, and every tenant's outbox");
  let messages: TenantMessage[] = [];
  try {
    messages = await readTenantTopics(brokers, `${prefix}_`, 180_000);
  } catch (error) {
    log(`checker could not read the topics: ${(error as Error).message}`);
  }
  const origins = await dbs.origins();
  const triggersNote = `${triggers.with} with, ${triggers.without} without`;
  await dbs.close();
  const result = checkTenants(origins, messages);
  const ws = workloadStats ?? mergeStats(dbs.workloads().map((w) => w.stats));

  const actual = emptyTally();
  actual.relays = relaySlots.filter((s, i) => s.starts > 0 && budget.running.has(i)).length;
  actual.relaysLiveAtOnce = budget.maxRunningAtOnce;
  actual.relaysOnProducer = adaptersSeen.filter((seen) => seen.size === 1 && seen.has(cfg.producer)).length;
  actual.relaysClaimingAhead = claimedAhead.filter((n) => n > 0).length;
  actual.relaysMovingShards = handedOver.filter((n, i) => n > 0 && handedBack[i]! > 0).length;
  actual.brokers = brokersInCluster;
  actual.rowsCommitted = ws.committed.length - ws.nudged;
  for (const { kind } of FAULT_KINDS) actual.faults[kind] = injector.injected[kind] ?? 0;
  const expected = { ...expectedTally(p), outboxes: 0, rowsCommitted: plans.reduce((n, t) => n + t.rows, 0) };
  const overshoot = plans.length * (p.maxRowsPerTransaction - 1);
  const generic = selfCheck(expected, actual, {
    relays: `started ${relaySlots.reduce((n, s) => n + s.starts, 0)} times; seen holding their control connection (<client id>:tenants) in pg_stat_activity: ${[...budget.running].map(relayClientId).join(', ') || 'none'}`,
    relaysLiveAtOnce: `sampled every ${BudgetSightings.intervalMs} ms`,
    relaysOnProducer: `${cfg.producer}; ${adaptersSeen.map((seen, i) => `relay ${i}: ${[...seen].map(([a, n]) => `${a} x${n}`).join(', ') || 'none'}`).join('; ')}`,
    relaysClaimingAhead: claimedAhead.map((n, i) => `relay ${i}: ${n}`).join(', '),
    relaysMovingShards: handedOver.map((n, i) => `relay ${i}: ${n} / ${handedBack[i]}`).join(', '),
    consumers: 'none: the checker reads every tenant\'s topic itself',
    ...injectedDetails(injector, { exactlyOnce: false }),
    'database-cut': `of tenant ${faults.flatMap((f) => (f.kind === 'database-cut' ? [f.outbox] : [])).join(', ')}`,
    rowsCommitted: `seen to commit by every tenant's writers (${ws.unknown.length} of unknown outcome not counted), shared out by the time each tenant writes: ${plans.map((t) => `${t.index}: ${t.rows}`).join(', ')}; the last transactions may add up to ${overshoot}`,
  }, overshoot);

  const added = plans.find((t) => t.added);
  const dropped = plans.find((t) => t.dropped);
  const addedOrigin = added && origins.find((o) => o.tenant === added.name);
  const onAddedTopic = new Set(messages.filter((m) => m.topic === addedOrigin?.topic).map((m) => m.messageId));
  const addedServers = new Set(served.filter((s) => s.tenant === added?.name && addStartedAt !== undefined && (processStartedAt.get(s.pid) ?? Infinity) < addStartedAt).map((s) => s.pid));
  const firstServed = served.find((s) => s.tenant === added?.name)?.at;
  // Every relay process that knew the dropped tenant (running since before the drop) and
  // lived on past a discovery interval (and 2 s to spare) after it must have let it go.
  const dropAt = dropStartedAt ?? Infinity;
  const knewDropped = [...processStartedAt].filter(([pid, at]) => at < dropAt && (lastLineAt.get(pid) ?? 0) > dropAt + setup.discoveryIntervalMs + 2_000).map(([pid]) => pid);
  const droppedBy = new Set(released.filter((r) => r.tenant === dropped?.name && r.at >= dropAt).map((r) => r.pid));
  const tenantActual: TenantTally = {
    tenantsServed: plans.filter((t) => (budget.servedBy.get(t.name)?.size ?? 0) > 0).length,
    tenantsServedByEveryRelay: plans.filter((t) => (budget.servedBy.get(t.name)?.size ?? 0) === p.relays).length,
    tenantsAtStart: Math.min(...tenantsAtStart.map((n) => n ?? 0)),
    withTrigger: triggers.with,
    withoutTrigger: triggers.without,
    addedServedByRunningRelays: addedServers.size,
    addedRowsDelivered: addedOrigin?.outbox.filter((r) => onAddedTopic.has(r.messageId)).length ?? 0,
    addedRowsCommitted: addedOrigin?.outbox.length ?? 0,
    droppedReleased: knewDropped.filter((pid) => droppedBy.has(pid)).length,
    droppedKnown: knewDropped.length,
    budgetSamples: budget.samples,
    mostConnections: Math.max(...budget.most),
    fullBudgetTenants: Math.min(...budget.mostTenantsAtOnce),
    relayExits: relaySlots.reduce((n, s) => n + s.unexpectedExits, 0),
  };
  const unnamed = [...budget.unnamed].map(([name, n]) => `${name} in ${n} samples`).join(', ');
  const tenantLines = tenantSelfCheck(expectedTenantTally(p), tenantActual, {
    tenantsServed: `relay slots seen serving each tenant (its relay's connections to the tenant's database): ${plans.map((t) => `${t.index}: ${[...(budget.servedBy.get(t.name) ?? [])].sort().map((i) => `relay ${i}`).join(' and ') || 'none'}`).join(', ')}`,
    tenantsAtStart: `each slot's first process, its 'tenant relay started' line: ${tenantsAtStart.map((n, i) => `relay ${i}: ${n ?? 'none'}`).join(', ')}`,
    withTrigger: `outbox_notify_insert in each tenant database's pg_trigger: ${triggersNote}`,
    addedServedByRunningRelays: added ? `tenant ${added.index} (${added.name}): processes started before its database was created that logged its relay started: ${[...addedServers].join(', ') || 'none'}; first served ${firstServed !== undefined && addStartedAt !== undefined && addReadyAt !== undefined ? `${firstServed - addStartedAt} ms after its database was created, ${firstServed - addReadyAt} ms after it was migrated and its topic made` : 'never'} (discovery every ${setup.discoveryIntervalMs} ms)` : undefined,
    addedRowsDelivered: added ? `distinct rows of tenant ${added.index}'s outbox found on ${addedOrigin?.topic}` : undefined,
    droppedReleased: dropped ? `tenant ${dropped.index} (${dropped.name}): relay processes running since before DROP DATABASE and logging still ${setup.discoveryIntervalMs + 2_000} ms after: ${knewDropped.join(', ') || 'none'}; of them, 'tenant released: the rule no longer finds it' after the drop from ${knewDropped.filter((pid) => droppedBy.has(pid)).join(', ') || 'none'}` : undefined,
    budgetSamples: `every ${BudgetSightings.intervalMs} ms`,
    mostConnections: `budget ${setup.maxDatabaseConnections} per process; most seen per slot: ${budget.most.map((n, i) => `relay ${i}: ${n} (${budget.mostByName[i]} by application_name alone)`).join(', ')}; found by client port only: ${unnamed || 'none'}${budget.overBudget.length ? `; over: ${budget.overBudget.join('; ')}` : ''}`,
    fullBudgetTenants: `most tenant databases each slot's process served at once: ${budget.mostTenantsAtOnce.map((n, i) => `relay ${i}: ${n}`).join(', ')}${budget.overTenants.length ? `; more than the budget's worth: ${budget.overTenants.join('; ')}` : ''}`,
    relayExits: relaySlots.map((s) => `${s.o.name}: ${s.exitCodes.join(', ') || 'none'}`).join('; '),
  });
  const lines = [...generic, ...tenantLines];

  const found = tenantViolations(result);
  if (drainedAt === undefined) found.push('not drained');
  found.push(...selfCheckFailures(lines));
  const { committed, rolledBack, unknown, ...workloadRest } = ws;
  const processes: RunReport['processes'] = {};
  for (const s of relaySlots) processes[s.o.name] = { starts: s.starts, unexpectedExits: s.unexpectedExits, exitCodes: s.exitCodes };
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
    brokerKills: [],
    workload: { ...workloadRest, committed: committed.length, rolledBack: rolledBack.length, unknown: unknown.length },
    drained: drainedAt !== undefined,
    drainAfterLastFaultMs: drainedAt === undefined ? null : drainedAt - injector.lastFaultEndAt,
    drainAfterQuietMs: drainedAt === undefined ? null : drainedAt - quietAt,
    processes,
    check: { ...result.merged, examples: { ...result.merged.examples, ...(result.wrongTenantExamples.length ? { wrongTenant: result.wrongTenantExamples } : {}) } },
    tenants: {
      wrongTenant: result.wrongTenant,
      perTenant: plans.map((t) => {
        const r = result.perTenant[t.name];
        return { tenant: t.name, trigger: t.trigger, added: t.added, dropped: t.dropped, committed: r?.committedRows ?? 0, delivered: r?.deliveredDistinct ?? 0, lost: r?.lost ?? 0, reorderings: r?.reorderings ?? 0 };
      }),
      budget: { samples: budget.samples, most: budget.most, mostByName: budget.mostByName, mostTenantsAtOnce: budget.mostTenantsAtOnce, unnamed: Object.fromEntries(budget.unnamed), overBudget: budget.overBudget, overTenants: budget.overTenants },
    },
    violations: found,
    ok: found.length === 0,
    wallMs: Date.now() - started,
    logs,
  };
}

/** `fn` with every slot's faults held off (each slot's exclusive section, taken in order). */
function holding<T>(slots: readonly Slot[], fn: () => Promise<T>): Promise<T> {
  return slots.reduceRight<() => Promise<T>>((inner, slot) => () => slot.exclusive(inner), fn)();
}
