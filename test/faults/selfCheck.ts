/**
 * The harness checks itself. A fault run proves something only if it ran what its profile
 * says: every relay (several of them, or takeover and fencing go untested), every
 * consumer, the broker, and every fault of every kind. The harness counts what it
 * actually started and saw running, and a run whose counts differ from the profile's
 * FAILS, whatever the checker found. Likewise a command that was to verify the planted
 * bugs fails when fewer planted runs completed than are listed. Pure logic
 * (test/unit/faultsProfile.test.ts).
 */
import { PLANTS, plantsOf, type Profile, type RunConfig } from './profiles.js';
import type { FaultKind } from './schedule.js';

/** Every fault kind and the profile count that says how many of it a run injects. */
export const FAULT_KINDS: ReadonlyArray<{ kind: FaultKind; count: keyof Profile['counts'] }> = [
  { kind: 'relay-kill', count: 'relayKills' },
  { kind: 'relay-pause', count: 'relayPauses' },
  { kind: 'broker-restart', count: 'brokerRestarts' },
  { kind: 'postgres-restart', count: 'postgresRestarts' },
  { kind: 'consumer-kill', count: 'consumerKills' },
  { kind: 'consumer-join', count: 'consumerJoins' },
  { kind: 'broker-kill', count: 'brokerKills' },
  { kind: 'leader-kill', count: 'leaderKills' },
  { kind: 'database-cut', count: 'databaseCuts' },
  { kind: 'pgbouncer-restart', count: 'pgbouncerRestarts' },
  { kind: 'relay-stall', count: 'relayStalls' },
  { kind: 'tenant-add', count: 'tenantAdds' },
  { kind: 'tenant-drop', count: 'tenantDrops' },
];

/** What ran in one run, or what should have. */
export interface Tally {
  /** Relay processes that ran: started, and seen heartbeating in the lease table. */
  relays: number;
  /** The most relays seen live in the lease table at one time. */
  relaysLiveAtOnce: number;
  /**
   * Relay slots whose processes published through the run's producer adapter, by their
   * own account (the `producer adapter publishing` log line each adapter writes at its
   * first acknowledged message), and never through another.
   */
  relaysOnProducer: number;
  /**
   * Exactly-once: the transactional-id prefixes the relay processes reported (their
   * `Kafka checks passed` line). One: relays under two prefixes neither fence each other
   * nor read each other's progress, and publish each other's crashed batches again.
   */
  transactionalIdPrefixes: number;
  /**
   * Relay slots that committed a batch claimed ahead, while their previous batch was
   * published (src/relay/workerLoop.ts), by their own account (a log line). At least one
   * must: the faults make backlogs, and the pipeline must have run under them.
   */
  relaysClaimingAhead: number;
  /**
   * Relay slots whose workers handed shards to worker 0 and back (src/relay/workerShards.ts).
   * Informational: whether a run holds a trickle long enough and then a backlog on one
   * relay depends on where its faults fall (a relay behind the pooler's few connections
   * makes full batches throughout); test/workerShards.integration.test.ts forces both.
   */
  relaysMovingShards: number;
  /** Consumer processes that ran: reported themselves started, and were assigned partitions. */
  consumers: number;
  /** Kafka brokers in the cluster, as the cluster itself reports them. */
  brokers: number;
  /** Outboxes in which every relay was seen heartbeating (each relay process serves them all).
   *  Expected 0 in the tenant profiles, and the line left out: a tenant is served by
   *  whichever relay has room for it, and tenantSelfCheck.ts counts the tenants served. */
  outboxes: number;
  /**
   * Rows the writers saw commit. The profile's `rows` (shared out over the outboxes) is
   * the target: each outbox's writers stop issuing once the rows in flight reach it, so
   * the last transactions may overshoot it by fewer than `maxRowsPerTransaction` rows
   * (see rowsOvershoot). Fewer means the deadline cut the workload short: the run tested
   * less than it says.
   */
  rowsCommitted: number;
  /**
   * Pooler profiles: relay slots seen as clients of the run's PgBouncer (its admin
   * console's `SHOW CLIENTS`, told apart by application_name) in a pool whose mode is
   * transaction (`SHOW POOLS`). 0 in the other profiles.
   */
  relaysThroughPooler: number;
  /** The same for the consumer slots. */
  consumersThroughPooler: number;
  /**
   * Pooler profiles: Postgres backends of the relays, consumers or writers (by
   * application_name: the writers that set one) that are not one of PgBouncer's server connections (`SHOW SERVERS`
   * remote_pid), seen so in two samples in a row: connections that went around
   * PgBouncer. Must be 0.
   */
  directBackends: number;
  /**
   * Exactly-once profiles: relay kills where the relay killed itself between a Kafka
   * commit and its Postgres COMMIT (test/faults/relayHooks.ts). At least one must.
   */
  relayKillsAfterKafkaCommit: number;
  /**
   * Exactly-once profiles, not planted: relay processes that started a unit and found rows
   * its progress named still unsent, marking them sent (their own log line). At least one
   * must: the kills made that case, and the relay must have met it.
   */
  relaysMarkingFromProgress: number;
  /** Faults injected (and completed), by kind. */
  faults: Record<FaultKind, number>;
}

/** What a run under `p` must run. */
export function expectedTally(p: Profile): Tally {
  const faults = {} as Record<FaultKind, number>;
  for (const { kind, count } of FAULT_KINDS) faults[kind] = p.counts[count] ?? 0;
  const pooled = p.pooler === 'transaction';
  return {
    relays: p.relays,
    relaysLiveAtOnce: p.relays,
    relaysOnProducer: p.relays,
    transactionalIdPrefixes: p.delivery === 'exactly-once' ? 1 : 0,
    relaysClaimingAhead: 1,
    relaysMovingShards: 0,
    consumers: p.consumers,
    brokers: p.brokers,
    outboxes: p.outboxes ?? 1,
    rowsCommitted: (p.outboxes ?? 1) * Math.ceil(p.rows / (p.outboxes ?? 1)),
    relaysThroughPooler: pooled ? p.relays : 0,
    consumersThroughPooler: pooled ? p.consumers : 0,
    directBackends: 0,
    relayKillsAfterKafkaCommit: p.delivery === 'exactly-once' ? 1 : 0,
    relaysMarkingFromProgress: p.delivery === 'exactly-once' ? 1 : 0,
    faults,
  };
}

/** How far past the target the writers' last transactions can take the rows committed. */
export function rowsOvershoot(p: Pick<Profile, 'maxRowsPerTransaction' | 'outboxes'>): number {
  return (p.outboxes ?? 1) * (p.maxRowsPerTransaction - 1);
}

/** An empty tally, to count into. */
export function emptyTally(): Tally {
  const faults = {} as Record<FaultKind, number>;
  for (const { kind } of FAULT_KINDS) faults[kind] = 0;
  return { relays: 0, relaysLiveAtOnce: 0, relaysOnProducer: 0, transactionalIdPrefixes: 0, relaysClaimingAhead: 0, relaysMovingShards: 0, consumers: 0, brokers: 0, outboxes: 0, rowsCommitted: 0, relaysThroughPooler: 0, consumersThroughPooler: 0, directBackends: 0, relayKillsAfterKafkaCommit: 0, relaysMarkingFromProgress: 0, faults };
}

/** One line of the self-check: "relays: 2 of 2". */
export interface SelfCheckLine {
  what: string;
  expected: number;
  actual: number;
  ok: boolean;
  /** How it was counted, for the report. */
  detail?: string;
}

function line(what: string, expected: number, actual: number, detail?: string): SelfCheckLine {
  return { what, expected, actual, ok: actual === expected, ...(detail ? { detail } : {}) };
}

/** Compare what ran with what should have, one line per count; `overshoot`: see {@link rowsOvershoot}. */
export function selfCheck(expected: Tally, actual: Tally, details: Partial<Record<string, string>> = {}, overshoot = 0): SelfCheckLine[] {
  const lines = [
    line('relays', expected.relays, actual.relays, details.relays),
    line('relays live at once', expected.relaysLiveAtOnce, actual.relaysLiveAtOnce, details.relaysLiveAtOnce),
    line('relays on the producer adapter', expected.relaysOnProducer, actual.relaysOnProducer, details.relaysOnProducer),
    line('transactional-id prefixes of the relays', expected.transactionalIdPrefixes, actual.transactionalIdPrefixes, details.transactionalIdPrefixes),
    { ...line('relays that claimed a batch ahead (at least)', expected.relaysClaimingAhead, actual.relaysClaimingAhead, details.relaysClaimingAhead), ok: actual.relaysClaimingAhead >= expected.relaysClaimingAhead },
    { ...line('relays that moved shards between their workers, both ways (informational)', expected.relaysMovingShards, actual.relaysMovingShards, details.relaysMovingShards), ok: true },
    line('consumers', expected.consumers, actual.consumers, details.consumers),
    line('Kafka brokers', expected.brokers, actual.brokers, details.brokers),
    ...(expected.outboxes > 0 ? [line('outboxes relayed by every relay', expected.outboxes, actual.outboxes, details.outboxes)] : []),
    {
      ...line('rows committed by the writers', expected.rowsCommitted, actual.rowsCommitted, details.rowsCommitted),
      ok: actual.rowsCommitted >= expected.rowsCommitted && actual.rowsCommitted <= expected.rowsCommitted + overshoot,
    },
    line('relays through PgBouncer in transaction pooling', expected.relaysThroughPooler, actual.relaysThroughPooler, details.relaysThroughPooler),
    line('consumers through PgBouncer in transaction pooling', expected.consumersThroughPooler, actual.consumersThroughPooler, details.consumersThroughPooler),
    line('backends connected around PgBouncer', expected.directBackends, actual.directBackends, details.directBackends),
    {
      ...line('relay kills between a Kafka commit and its Postgres COMMIT (at least)', expected.relayKillsAfterKafkaCommit, actual.relayKillsAfterKafkaCommit, details.relayKillsAfterKafkaCommit),
      ok: actual.relayKillsAfterKafkaCommit >= expected.relayKillsAfterKafkaCommit,
    },
    {
      ...line('relay processes that marked rows sent from a unit\'s progress (at least)', expected.relaysMarkingFromProgress, actual.relaysMarkingFromProgress, details.relaysMarkingFromProgress),
      ok: actual.relaysMarkingFromProgress >= expected.relaysMarkingFromProgress,
    },
  ];
  for (const { kind } of FAULT_KINDS) lines.push(line(`fault ${kind}`, expected.faults[kind], actual.faults[kind] ?? 0, details[kind]));
  return lines;
}

/** Whether the command ran every run it planned, and every planted case it lists. */
export function runsCheck(planned: readonly RunConfig[], completed: readonly string[], verifyPlanted: boolean): SelfCheckLine[] {
  const done = new Set(completed);
  const lines = [line('runs', planned.length, planned.filter((r) => done.has(r.name)).length)];
  if (verifyPlanted) {
    const plantedDone = planned.filter((r) => r.plant !== 'none' && done.has(r.name)).length;
    const plants = planned[0] ? plantsOf(planned[0].profile) : PLANTS;
    lines.push(line('planted cases', plants.length, plantedDone, plants.join(', ')));
  }
  return lines;
}

/** The lines that failed, as short strings ("relays 1 of 2"). */
export function selfCheckFailures(lines: readonly SelfCheckLine[]): string[] {
  return lines.filter((l) => !l.ok).map((l) => `self-check: ${l.what} ${l.actual} of ${l.expected}`);
}

/** "relays: 2 of 2 (detail)" */
export function formatLine(l: SelfCheckLine): string {
  return `${l.what}: ${l.actual} of ${l.expected}${l.detail ? ` (${l.detail})` : ''}${l.ok ? '' : '  MISMATCH'}`;
}
