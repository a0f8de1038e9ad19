/**
 * The fault schedule: which faults, against which process, when and for how long, all
 * derived from one seed so that a run can be repeated.
 */

/** mulberry32: a tiny, good-enough 32-bit PRNG. Returns floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A PRNG with helpers. */
export class Random {
  readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  /** Integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(list: readonly T[]): T {
    return list[Math.floor(this.next() * list.length)] as T;
  }
  /** A derived seed, for an independent stream (one per writer, say). */
  fork(): Random {
    return new Random(Math.floor(this.next() * 4294967296));
  }
}

export type Fault =
  /** SIGKILL a relay, start it again `downMs` later. `after-kafka-commit` (exactly-once
   *  profiles): the relay kills itself right after its next Kafka transaction committed,
   *  before that batch's Postgres COMMIT (test/faults/relayHooks.ts). */
  | { kind: 'relay-kill'; atMs: number; relay: number; downMs: number; moment?: 'any' | 'after-kafka-commit' }
  /** SIGSTOP a relay for `pauseMs` (longer than its lease), then SIGCONT. */
  | { kind: 'relay-pause'; atMs: number; relay: number; pauseMs: number }
  /** Exactly-once profiles: the relay's next Kafka transaction, its records sent, waits
   *  (the relay's FAULTS_STALL_MS, past its transaction timeout) before it goes on, while
   *  the process and its leases stay live (test/faults/relayHooks.ts, SIGWINCH). */
  | { kind: 'relay-stall'; atMs: number; relay: number }
  /** Stop the Kafka broker (SIGTERM), start it again. */
  | { kind: 'broker-restart'; atMs: number }
  /** SIGKILL one node of the Kafka cluster (by node id), start it again `downMs` later. */
  | { kind: 'broker-kill'; atMs: number; node: number; downMs: number }
  /** SIGKILL the node that leads `partition` of the run's topic at that moment (asked of
   *  the cluster's metadata), start it again `downMs` later. */
  | { kind: 'leader-kill'; atMs: number; partition: number; downMs: number }
  /** Restart Postgres: `fast` (clean) or `immediate` (a crash, WAL replay). */
  | { kind: 'postgres-restart'; atMs: number; mode: 'fast' | 'immediate' }
  /** SIGKILL a consumer process, start it again `downMs` later. `after-db-commit`: at
   *  its next transaction's commit, before the offset commit (the worst moment). */
  | { kind: 'consumer-kill'; atMs: number; consumer: number; downMs: number; moment: 'any' | 'after-db-commit' }
  /** An extra consumer process joins the group and leaves it (SIGTERM) `stayMs` later. */
  | { kind: 'consumer-join'; atMs: number; stayMs: number }
  /** Cut outbox `outbox`'s database off for `downMs` (ALLOW_CONNECTIONS false and its
   *  backends terminated), then let it back: multi-outbox profiles, an outbox of its own
   *  database (never the first, which holds the consumers' tables). */
  | { kind: 'database-cut'; atMs: number; outbox: number; downMs: number }
  /** Restart the run's PgBouncer (pooler profiles): `kill` (SIGKILL, then start it again
   *  on the same port) or `clean` (a clean stop and start). Every client connection is
   *  cut either way; Postgres stays up. */
  | { kind: 'pgbouncer-restart'; atMs: number; mode: 'kill' | 'clean' }
  /** Tenant profiles: tenant `tenant`'s database is created, migrated and given its topic
   *  while the other tenants' writers run, then its own writers start; the relays must
   *  find it by themselves (their rule, evaluated every discovery interval). */
  | { kind: 'tenant-add'; atMs: number; tenant: number }
  /** Tenant profiles: once tenant `tenant`'s writers are done (their share ends here) and
   *  its rows are all sent, its database is dropped (WITH (FORCE)) while the others' run. */
  | { kind: 'tenant-drop'; atMs: number; tenant: number };

export type FaultKind = Fault['kind'];

export interface FaultCounts {
  relayKills: number;
  relayPauses: number;
  brokerRestarts: number;
  postgresRestarts: number;
  consumerKills: number;
  consumerJoins: number;
  /** SIGKILLs of a cluster node picked at random (cluster profiles only). */
  brokerKills: number;
  /** SIGKILLs of a partition's leader (cluster profiles only). */
  leaderKills: number;
  /** Databases of outboxes cut off (multi-outbox profiles only; default 0). */
  databaseCuts?: number;
  /** Restarts of PgBouncer (pooler profiles only; default 0). */
  pgbouncerRestarts?: number;
  /** Relays stalled with a Kafka transaction open past its timeout (exactly-once profiles only; default 0). */
  relayStalls?: number;
  /** Tenants added while the writers run (tenant profiles only; default 0). */
  tenantAdds?: number;
  /** Tenants dropped while the writers run (tenant profiles only; default 0). */
  tenantDrops?: number;
}

export interface ScheduleOptions {
  seed: number;
  counts: FaultCounts;
  /** Faults start no earlier than this (ms after the workload starts)... */
  startMs: number;
  /** ...and no later than this. */
  endMs: number;
  relays: number;
  consumers: number;
  /** A pause lasts longer than this (the relays' lease TTL). */
  leaseTtlMs: number;
  /** Kafka nodes (broker kills pick one of 1..brokers). */
  brokers?: number;
  /** Partitions of the topic (leader kills pick one). */
  partitions?: number;
  /** Outboxes of the run (database cuts pick one of 1..outboxes-1). */
  outboxes?: number;
  /** Exactly-once profiles: every other relay kill lands between a Kafka commit and its Postgres COMMIT. */
  relayKillsAfterKafkaCommit?: boolean;
  /** Tenant profiles: tenants at the start. Added tenants are numbered after them; dropped
   *  ones are the last of them, counting down. */
  tenants?: number;
}

/**
 * Spread the faults over [startMs, endMs] at random times. Broker and Postgres restarts
 * are kept apart from each other (at least `gap` ms) so that each one's recovery is
 * exercised on its own; process faults land anywhere, overlapping those.
 */
export function buildSchedule(o: ScheduleOptions): Fault[] {
  const rnd = new Random(o.seed);
  const span = Math.max(1, o.endMs - o.startMs);
  const at = (): number => o.startMs + Math.floor(rnd.next() * span);
  const faults: Fault[] = [];

  // Infrastructure restarts: evenly spaced slots, jittered within each slot.
  // Broker kills and leader kills are infrastructure faults too: one at a time, so a
  // 3-node cluster never has two nodes down (it keeps min.insync.replicas=2).
  type Infra = 'broker' | 'postgres' | 'broker-kill' | 'leader-kill' | 'database-cut' | 'pgbouncer';
  const infra: Infra[] = [
    ...Array.from({ length: o.counts.brokerRestarts }, () => 'broker' as const),
    ...Array.from({ length: o.counts.postgresRestarts }, () => 'postgres' as const),
    ...Array.from({ length: o.counts.brokerKills }, () => 'broker-kill' as const),
    ...Array.from({ length: o.counts.leaderKills }, () => 'leader-kill' as const),
    ...Array.from({ length: o.counts.databaseCuts ?? 0 }, () => 'database-cut' as const),
    ...Array.from({ length: o.counts.pgbouncerRestarts ?? 0 }, () => 'pgbouncer' as const),
  ];
  // Shuffle (Fisher-Yates) so the kinds interleave.
  for (let i = infra.length - 1; i > 0; i--) {
    const j = Math.floor(rnd.next() * (i + 1));
    [infra[i], infra[j]] = [infra[j] as Infra, infra[i] as Infra];
  }
  const slot = span / Math.max(1, infra.length);
  let postgresIndex = 0;
  let pgbouncerIndex = 0;
  infra.forEach((kind, i) => {
    const atMs = Math.floor(o.startMs + slot * i + slot * (0.15 + 0.5 * rnd.next()));
    if (kind === 'broker') faults.push({ kind: 'broker-restart', atMs });
    else if (kind === 'broker-kill') faults.push({ kind: 'broker-kill', atMs, node: rnd.int(1, o.brokers ?? 1), downMs: rnd.int(500, 5_000) });
    else if (kind === 'database-cut') faults.push({ kind: 'database-cut', atMs, outbox: rnd.int(1, Math.max(1, (o.outboxes ?? 2) - 1)), downMs: rnd.int(2_000, 6_000) });
    // Alternate, starting with the SIGKILL, as for Postgres below.
    else if (kind === 'pgbouncer') faults.push({ kind: 'pgbouncer-restart', atMs, mode: pgbouncerIndex++ % 2 === 0 ? 'kill' : 'clean' });
    else if (kind === 'leader-kill') faults.push({ kind: 'leader-kill', atMs, partition: rnd.int(0, (o.partitions ?? 1) - 1), downMs: rnd.int(500, 5_000) });
    else {
      // Alternate, starting with the crash: both kinds happen as soon as there are two.
      faults.push({ kind: 'postgres-restart', atMs, mode: postgresIndex++ % 2 === 0 ? 'immediate' : 'fast' });
    }
  });

  for (let i = 0; i < o.counts.relayKills; i++) {
    // In this order: the schedules of the other profiles' seeds stay what they were.
    const atMs = at();
    const relay = rnd.int(0, o.relays - 1);
    const downMs = rnd.int(100, 2_000);
    faults.push(o.relayKillsAfterKafkaCommit ? { kind: 'relay-kill', atMs, relay, downMs, moment: i % 2 === 0 ? 'after-kafka-commit' : 'any' } : { kind: 'relay-kill', atMs, relay, downMs });
  }
  for (let i = 0; i < o.counts.relayPauses; i++) {
    faults.push({ kind: 'relay-pause', atMs: at(), relay: rnd.int(0, o.relays - 1), pauseMs: o.leaseTtlMs + rnd.int(1_000, 3_000) });
  }
  for (let i = 0; i < o.counts.consumerKills; i++) {
    // Every other one at the worst moment.
    faults.push({ kind: 'consumer-kill', atMs: at(), consumer: rnd.int(0, o.consumers - 1), downMs: rnd.int(100, 3_000), moment: i % 2 === 0 ? 'after-db-commit' : 'any' });
  }
  for (let i = 0; i < o.counts.consumerJoins; i++) {
    faults.push({ kind: 'consumer-join', atMs: at(), stayMs: rnd.int(2_000, 10_000) });
  }
  // Drawn last, so every other fault of a seed stays where it was. In the first half of
  // the window: a stall needs a transaction, and the relay's other faults may hold it up
  // (one armed at t+54 s, after the last write, found none to stall: seed 404).
  for (let i = 0; i < (o.counts.relayStalls ?? 0); i++) {
    faults.push({ kind: 'relay-stall', atMs: o.startMs + Math.floor(rnd.next() * span * 0.5), relay: rnd.int(0, o.relays - 1) });
  }
  // Drawn after everything else, for the same reason. An added tenant comes early enough
  // to write for most of the window; a dropped one late enough to have been served with
  // the others for a while, and early enough that the others write on for long after.
  for (let i = 0; i < (o.counts.tenantAdds ?? 0); i++) {
    faults.push({ kind: 'tenant-add', atMs: o.startMs + Math.floor(span * (0.15 + 0.2 * rnd.next())), tenant: (o.tenants ?? 0) + i });
  }
  for (let i = 0; i < (o.counts.tenantDrops ?? 0); i++) {
    faults.push({ kind: 'tenant-drop', atMs: o.startMs + Math.floor(span * (0.45 + 0.15 * rnd.next())), tenant: (o.tenants ?? 0) - 1 - i });
  }
  return faults.sort((a, b) => a.atMs - b.atMs);
}

/** One line per fault, for the log at start. */
export function describeFault(f: Fault): string {
  const t = `t+${(f.atMs / 1000).toFixed(1)}s`.padEnd(9);
  switch (f.kind) {
    case 'relay-kill':
      return `${t} relay ${f.relay} SIGKILL${f.moment === 'after-kafka-commit' ? " between a Kafka commit and its batch's Postgres COMMIT" : ''}, restarted after ${f.downMs} ms`;
    case 'relay-pause':
      return `${t} relay ${f.relay} SIGSTOP for ${f.pauseMs} ms, then SIGCONT`;
    case 'relay-stall':
      return `${t} relay ${f.relay} stalls its next Kafka transaction past the transaction timeout, process and leases live`;
    case 'broker-restart':
      return `${t} Kafka broker restart`;
    case 'broker-kill':
      return `${t} Kafka node ${f.node} SIGKILL, restarted after ${f.downMs} ms`;
    case 'leader-kill':
      return `${t} Kafka leader of partition ${f.partition} SIGKILL, restarted after ${f.downMs} ms`;
    case 'postgres-restart':
      return `${t} Postgres restart (${f.mode === 'immediate' ? 'crash: stop -m immediate' : 'clean: stop -m fast'})`;
    case 'consumer-kill':
      return `${t} consumer ${f.consumer} SIGKILL${f.moment === 'after-db-commit' ? ' between its Postgres commit and its offset commit' : ''}, restarted after ${f.downMs} ms`;
    case 'consumer-join':
      return `${t} an extra consumer joins the group, leaves after ${f.stayMs} ms`;
    case 'database-cut':
      // In the tenant profiles the outbox of index i is tenant i's.
      return `${t} outbox ${f.outbox}'s database (tenant ${f.outbox}'s in the tenant profiles) cut off for ${f.downMs} ms (ALLOW_CONNECTIONS false, backends terminated)`;
    case 'pgbouncer-restart':
      return `${t} PgBouncer restart (${f.mode === 'kill' ? 'SIGKILL, then start' : 'clean stop and start'}; Postgres stays up)`;
    case 'tenant-add':
      return `${t} tenant ${f.tenant} added (database created, migrated, its topic; then its writers start)`;
    case 'tenant-drop':
      return `${t} tenant ${f.tenant} dropped (its writers done and its rows all sent, then DROP DATABASE … WITH (FORCE))`;
  }
}
