/**
 * Fault injection: carries out a schedule's faults (schedule.ts) against the processes
 * and servers of a run, and counts each fault it completed, by kind, for the report and
 * the self-check. A fault that fails, or finds nothing to act on (no process to kill, a
 * joining consumer never assigned partitions), is logged and not counted, so the
 * self-check notices it.
 */
import pg from 'pg';
import { waitFor } from '../helpers/wait.js';
import { describeFault, type Fault, type FaultKind } from './schedule.js';
import type { Slot } from './processes.js';
import type { Servers } from './servers.js';
import { ClusterNodeKiller, type BrokerKill } from './clusterNodeKill.js';

export interface InjectTargets {
  servers: Servers;
  relays: readonly Slot[];
  consumers: readonly Slot[];
  /** A new consumer process (not started yet), for a consumer joining the group. */
  extraConsumer(): Slot;
  log(line: string): void;
  /** The run's topic: leader kills look up its partitions' leaders. */
  topic?: string;
  /**
   * Whether relay slot `relay` has published through the producer adapter yet. A relay
   * fault waits for it: a relay killed before its first batch (a slow start on a busy
   * machine) may sit out a short run without shards, and the run would not show what
   * its profile says about every relay and the adapter.
   */
  relayPublished?(relay: number): boolean;
  /** The last `stall-refused` report of each relay process, by pid (relayHooks.ts). */
  stallReports?: ReadonlyMap<number, { openMs: number; error: string }>;
  /** Cut off (true) or let back (false) the database of outbox `outbox` (multi-outbox runs). */
  cutDatabase?(outbox: number, cut: boolean): Promise<void>;
  /** Commit a few rows beside the writers if they have written nothing for a second
   *  (workload.ts, Workload.nudge); never throws. */
  nudgeIdleWriters?(): Promise<void>;
  /** Add or drop a tenant (tenant profiles: tenantHarness.ts); resolves when it is done, throws if it could not be. */
  tenantFault?(f: Extract<Fault, { kind: 'tenant-add' | 'tenant-drop' }>): Promise<void>;
}

/** One restart of PgBouncer, for the report. */
export interface PgBouncerRestart {
  mode: 'kill' | 'clean';
  fromPid: number;
  toPid: number;
  /** Until the new process' admin console answered, ms. */
  backMs: number;
}

/** One relay stall with a Kafka transaction open, for the report. */
export interface RelayStall {
  relay: number;
  /** How long the transaction was open, from the stall to Kafka's refusal, ms. */
  openMs: number;
  /** What Kafka answered when the relay went on with it. */
  refusal: string;
  /** From the refusal to the same process' next Kafka commit, ms. */
  recoveredMs: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class Injector {
  /** Faults completed, by kind. */
  readonly injected: Partial<Record<FaultKind, number>> = {};
  /** Faults that threw, with why. */
  readonly failed: string[] = [];
  /** Consumer kills at the worst moment where the consumer killed itself at its commit
   *  (the rest were SIGKILLed after 10 s without a commit). */
  worstMomentKills = 0;
  /** Relay kills at the worst moment where the relay killed itself between a Kafka commit and its Postgres COMMIT. */
  relayWorstMomentKills = 0;
  /** When the last fault was over (restart done, pause over). */
  lastFaultEndAt = Date.now();
  /** Every cluster node SIGKILLed, leaders included, in order. */
  readonly brokerKills: BrokerKill[] = [];
  /** Every PgBouncer restart, in order. */
  readonly pgbouncerRestarts: PgBouncerRestart[] = [];
  /** Relay stalls that Kafka refused and the relay recovered from, in order. */
  readonly relayStalls: RelayStall[] = [];
  /** Postgres restarts: the server's start time before and after (pg_postmaster_start_time()). */
  readonly postgresRestarts: Array<{ mode: 'fast' | 'immediate'; before: string; after: string }> = [];
  /** Postgres restarts with PgBouncer in front: its pid, the same before and after. */
  readonly postgresRestartsBehindPooler: Array<{ pgbouncerPid: number }> = [];
  /** Infrastructure restarts never overlap each other. */
  private infra: Promise<void> = Promise.resolve();
  /** Whether an infrastructure restart runs now, and when the last one ended (ms since the epoch). */
  private infraRunning = false;
  private infraEndedAt = 0;

  /** SIGKILLs of cluster nodes, and the admin client they look leaders up with. */
  private readonly nodes: ClusterNodeKiller;

  constructor(private readonly t: InjectTargets) {
    this.nodes = new ClusterNodeKiller(t);
  }

  /** Close the admin client of leader look-ups. */
  async close(): Promise<void> {
    await this.nodes.close();
  }

  /** Inject every fault at its time after `startAt`; resolves when all are over. */
  async runSchedule(faults: readonly Fault[], startAt: number): Promise<void> {
    await Promise.all(
      faults.map(async (f) => {
        await sleep(Math.max(0, startAt + f.atMs - Date.now()));
        try {
          await this.inject(f);
        } catch (error) {
          this.failed.push(`${describeFault(f)}: ${(error as Error).message}`);
          this.t.log(`fault ${describeFault(f)} failed: ${(error as Error).message}`);
        }
      }),
    );
  }

  /** `fn`, while rows are nudged in every half second the writers are idle (InjectTargets.nudgeIdleWriters). */
  private async withRowsToCommit<T>(fn: () => Promise<T>): Promise<T> {
    const nudge = this.t.nudgeIdleWriters;
    if (!nudge) return fn();
    let nudging = true;
    const loop = (async () => {
      while (nudging) {
        await nudge();
        await sleep(500);
      }
    })();
    try {
      return await fn();
    } finally {
      nudging = false;
      await loop;
    }
  }

  /** Wait (60 s at most) until relay slot `relay` has published once; see relayPublished. */
  private async published(relay: number): Promise<void> {
    const check = this.t.relayPublished;
    if (!check || check(relay)) return;
    const t = Date.now();
    try {
      await waitFor(`relay ${relay} publishing`, () => check(relay), { timeoutMs: 60_000, intervalMs: 50 });
      this.t.log(`relay ${relay}: its fault waited ${Date.now() - t} ms for its first batch published`);
    } catch (error) {
      this.t.log(`relay ${relay}: ${(error as Error).message}; the fault goes ahead`);
    }
  }

  private exclusiveInfra(fn: () => Promise<void>): Promise<void> {
    const result = this.infra.then(async () => {
      this.infraRunning = true;
      try {
        await fn();
      } finally {
        this.infraRunning = false;
        this.infraEndedAt = Date.now();
      }
    });
    this.infra = result.catch(() => undefined);
    return result;
  }

  private mark(kind: FaultKind): void {
    this.injected[kind] = (this.injected[kind] ?? 0) + 1;
  }

  /** Carry out one fault now. */
  async inject(f: Fault): Promise<void> {
    const { log, servers } = this.t;
    switch (f.kind) {
      case 'relay-kill': {
        const slot = this.slot(this.t.relays, f.relay, 'relay');
        await slot.exclusive(async () => {
          await this.running(slot, `relay ${f.relay}`);
          await this.published(f.relay);
          if (f.moment === 'after-kafka-commit') {
            // The process restarted by an earlier fault may still be loading: SIGUSR2 before its
            // handler is in ends it at once (exit by SIGUSR2), nowhere near a Kafka commit. And
            // one that has not published yet is still taking over its units (leases, starts),
            // often for longer than the 10 s the kill waits: armed only once it has committed.
            // Both waits need rows to commit, and a schedule stretched by earlier faults' waits
            // can get here after the writers are done (CI, seed 95635194: two armed kills of
            // relay 1 at t = 232 s and 241 s found no commit): rows are nudged in meanwhile.
            const outcome = await this.withRowsToCommit(async () => {
              await waitFor(`relay ${f.relay} committing`, () => slot.currentEvents.has('kafka-committed'), { timeoutMs: 60_000, intervalMs: 50 }).catch(() =>
                log(`relay ${f.relay}: its current process made no Kafka commit within 60 s; the fault goes ahead`),
              );
              log(`FAULT relay ${f.relay}: SIGKILL right after its next Kafka commit, before that batch's Postgres COMMIT (restart in ${f.downMs} ms)`);
              return slot.signalAndAwaitExit('SIGUSR2', 10_000);
            });
            if (outcome === 'by-itself') this.relayWorstMomentKills++;
            if (outcome === 'unhandled') log(`relay ${f.relay}: ended by SIGUSR2 itself (its hooks were not in yet); not a kill at a Kafka commit`);
            if (outcome === 'killed') log(`relay ${f.relay}: no Kafka commit within 10 s; SIGKILLed anyway`);
            if (outcome === 'no-process') log(`relay ${f.relay}: no process to kill; not counted`);
            else this.mark(f.kind);
          } else {
            log(`FAULT relay ${f.relay}: SIGKILL (restart in ${f.downMs} ms)`);
            if (await slot.kill()) this.mark(f.kind);
            else log(`relay ${f.relay}: no process to kill; not counted`);
          }
          await sleep(f.downMs);
          slot.start();
        });
        break;
      }
      case 'relay-pause': {
        const slot = this.slot(this.t.relays, f.relay, 'relay');
        await slot.exclusive(async () => {
          await this.running(slot, `relay ${f.relay}`);
          await this.published(f.relay);
          log(`FAULT relay ${f.relay}: SIGSTOP for ${f.pauseMs} ms`);
          if (slot.pause()) this.mark(f.kind);
          else log(`relay ${f.relay}: not running; pause not counted`);
          await sleep(f.pauseMs);
          slot.resume();
          log(`relay ${f.relay}: SIGCONT`);
        });
        break;
      }
      case 'relay-stall': {
        const slot = this.slot(this.t.relays, f.relay, 'relay');
        await slot.exclusive(() => this.stallRelay(slot, f.relay));
        break;
      }
      case 'broker-restart':
        await this.exclusiveInfra(async () => {
          log('FAULT Kafka broker: restart');
          const t = Date.now();
          await servers.kafka.restart();
          this.mark(f.kind);
          log(`Kafka broker back after ${Date.now() - t} ms`);
        });
        break;
      case 'broker-kill':
      case 'leader-kill':
        await this.exclusiveInfra(async () => {
          const kill = await this.nodes.kill(f);
          if (!kill) return;
          this.mark(f.kind);
          this.brokerKills.push(kill);
        });
        break;
      case 'postgres-restart':
        await this.exclusiveInfra(async () => {
          log(`FAULT Postgres: restart (${f.mode})${servers.pgbouncer ? ', behind PgBouncer' : ''}`);
          const t = Date.now();
          const bouncerPid = servers.pgbouncer?.pid();
          // A restart counts only if the server's start time moved: it really went down.
          const before = await this.postmasterStart();
          await servers.postgres.restart(f.mode);
          const after = await this.postmasterStart();
          if (before === after) {
            log(`Postgres start time ${before} before and after; not counted`);
            return;
          }
          this.postgresRestarts.push({ mode: f.mode, before, after });
          if (servers.pgbouncer) {
            // Behind PgBouncer means PgBouncer itself stayed up while Postgres went away.
            const after = servers.pgbouncer.pid();
            if (bouncerPid === undefined || after !== bouncerPid) {
              log(`PgBouncer was not up throughout the Postgres restart (pid ${bouncerPid} before, ${after} after); not counted`);
              return;
            }
            this.postgresRestartsBehindPooler.push({ pgbouncerPid: after });
          }
          this.mark(f.kind);
          log(`Postgres back after ${Date.now() - t} ms`);
        });
        break;
      case 'database-cut':
        await this.exclusiveInfra(async () => {
          const cut = this.t.cutDatabase;
          if (!cut) throw new Error('this run has no second outbox database to cut off');
          log(`FAULT outbox ${f.outbox}: database cut off for ${f.downMs} ms`);
          await cut(f.outbox, true);
          try {
            await sleep(f.downMs);
          } finally {
            await cut(f.outbox, false);
          }
          this.mark(f.kind);
          log(`outbox ${f.outbox}: database reachable again`);
        });
        break;
      case 'pgbouncer-restart':
        await this.exclusiveInfra(() => this.restartPgBouncer(f));
        break;
      case 'tenant-add':
      case 'tenant-drop':
        if (!this.t.tenantFault) throw new Error(`${f.kind} needs a tenant profile's run`);
        await this.t.tenantFault(f);
        this.mark(f.kind);
        break;
      case 'consumer-kill': {
        const slot = this.slot(this.t.consumers, f.consumer, 'consumer');
        await slot.exclusive(async () => {
          if (f.moment === 'after-db-commit') {
            await waitFor(`consumer ${f.consumer} started`, () => slot.ready, { timeoutMs: 30_000, intervalMs: 50 }).catch(() => undefined);
            log(`FAULT consumer ${f.consumer}: SIGKILL at its next Postgres commit, before the offset commit (restart in ${f.downMs} ms)`);
            const outcome = await slot.signalAndAwaitExit('SIGUSR2', 10_000);
            if (outcome === 'by-itself') this.worstMomentKills++;
            if (outcome === 'killed') log(`consumer ${f.consumer}: no commit within 10 s; SIGKILLed anyway`);
            if (outcome === 'no-process') log(`consumer ${f.consumer}: no process to kill; not counted`);
            else this.mark(f.kind);
          } else {
            await this.running(slot, `consumer ${f.consumer}`);
            log(`FAULT consumer ${f.consumer}: SIGKILL (restart in ${f.downMs} ms)`);
            if (await slot.kill()) this.mark(f.kind);
            else log(`consumer ${f.consumer}: no process to kill; not counted`);
          }
          await sleep(f.downMs);
          slot.start();
        });
        break;
      }
      case 'consumer-join': {
        const slot = this.t.extraConsumer();
        log(`FAULT ${slot.o.name}: joins the group for ${f.stayMs} ms`);
        slot.start();
        // Counted once it is in the group (partitions assigned), and it stays from then on:
        // a process that had not got that far before it left would rebalance nothing. A
        // broker or Postgres restart in progress holds every join up (on a loaded machine
        // the broker took 70 s to come back): the 30 s count from its end, also for one
        // that starts while the consumer is joining (a CI run's broker restart 3 s into a
        // kafkajs join kept the broker away 22 s, and the join missed a fixed 30 s).
        await this.infra.catch(() => undefined);
        const joinedAt = Date.now();
        const outcome = await waitFor(
          `${slot.o.name} assigned partitions`,
          () => ((slot.events.assigned ?? 0) > 0 ? 'joined' : !this.infraRunning && Date.now() - Math.max(joinedAt, this.infraEndedAt) > 30_000 ? 'gave up' : false),
          { timeoutMs: 300_000, intervalMs: 50 },
        ).catch(() => 'gave up');
        if (outcome === 'joined') this.mark(f.kind);
        else log(`${slot.o.name}: no partitions assigned within 30 s of its start or of the last restart of Postgres or Kafka; not counted`);
        await sleep(f.stayMs);
        log(`${slot.o.name}: leaves the group (SIGTERM)`);
        await slot.stop(20_000);
        break;
      }
    }
    this.lastFaultEndAt = Math.max(this.lastFaultEndAt, Date.now());
  }

  /** The Postgres server's start time, as it reports it. */
  private async postmasterStart(): Promise<string> {
    const client = new pg.Client({ connectionString: this.t.servers.postgres.url, application_name: 'faults-injector' });
    await client.connect();
    try {
      const { rows } = await client.query<{ t: string }>('SELECT pg_postmaster_start_time()::text AS t');
      return rows[0]!.t;
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /**
   * Stall relay `index`'s next Kafka transaction past its timeout (test/faults/relayHooks.ts:
   * SIGWINCH arms it) and wait for its process to report the three steps: the stall begun,
   * Kafka refusing the transaction when the relay went on with it, and the same process'
   * next Kafka commit. Counted only when all three happened in one process; a transaction
   * Kafka let commit after the stall, or a process that died, is logged and not counted.
   */
  private async stallRelay(slot: Slot, index: number): Promise<void> {
    const { log } = this.t;
    await this.running(slot, `relay ${index}`);
    await this.published(index);
    const seen = (event: string): number => slot.events[event] ?? 0;
    const base = { begun: seen('stall-begun'), refused: seen('stall-refused'), accepted: seen('stall-accepted'), recovered: seen('stall-recovered') };
    let child = slot.child;
    const alive = (): boolean => child !== undefined && slot.child === child;
    const step = async (what: string, done: () => boolean, timeoutMs: number): Promise<boolean> =>
      waitFor(`relay ${index}: ${what}`, () => done() || !alive(), { timeoutMs, intervalMs: 50 }).then(() => done(), () => false);
    log(`FAULT relay ${index}: its next Kafka transaction stalls past its transaction timeout`);
    // A process that exits before its stall began (a Postgres crash meanwhile, say) is
    // armed again once restarted, three times at most: a stall is a property of a live
    // relay's transaction, and the restart is counted elsewhere.
    for (let attempt = 1; ; attempt++) {
      child = slot.child;
      if (!child || slot.state !== 'running') {
        log(`relay ${index}: not running; stall not counted`);
        return;
      }
      child.kill('SIGWINCH');
      if (await step('a transaction stalled', () => seen('stall-begun') > base.begun, 60_000)) break;
      if (alive() || attempt === 3) {
        log(`relay ${index}: no transaction stalled within 60 s${alive() ? '' : ' (its process exited)'}; not counted`);
        return;
      }
      log(`relay ${index}: its process exited before the stall began; arming the next one`);
      // Armed once the new process' preload listens for the signal (its first report).
      const ready = seen('hooks-ready');
      await waitFor(`relay ${index}: a new process with its hooks`, () => seen('hooks-ready') > ready && slot.state === 'running', { timeoutMs: 60_000, intervalMs: 50 }).catch(() => undefined);
    }
    const t0 = Date.now();
    if (!(await step('Kafka refusing the stalled transaction', () => seen('stall-refused') > base.refused || seen('stall-accepted') > base.accepted, 60_000)) || seen('stall-refused') === base.refused) {
      log(`relay ${index}: ${seen('stall-accepted') > base.accepted ? 'Kafka committed the stalled transaction' : 'no answer to the stalled transaction within 60 s'}; not counted`);
      return;
    }
    const refusedAt = Date.now();
    if (!(await step('its next Kafka commit', () => seen('stall-recovered') > base.recovered, 60_000))) {
      log(`relay ${index}: no Kafka commit within 60 s after the refusal${alive() ? '' : ' (its process exited)'}; not counted`);
      return;
    }
    const last = this.t.stallReports?.get(child?.pid ?? 0);
    this.mark('relay-stall');
    this.relayStalls.push({ relay: index, openMs: last?.openMs ?? refusedAt - t0, refusal: last?.error ?? '?', recoveredMs: Date.now() - refusedAt });
    log(`relay ${index}: Kafka refused the transaction open ${last?.openMs ?? '?'} ms (${last?.error ?? '?'}); the same process committed again ${Date.now() - refusedAt} ms later`);
  }

  /**
   * SIGKILL PgBouncer and start it again, or stop it cleanly (SIGTERM: PgBouncer's
   * immediate shutdown) and start it, on the same port. Counted when a process was
   * running before and a new one serves its admin console after.
   */
  private async restartPgBouncer(f: Extract<Fault, { kind: 'pgbouncer-restart' }>): Promise<void> {
    const { log, servers } = this.t;
    const bouncer = servers.pgbouncer;
    if (!bouncer) throw new Error('pgbouncer-restart needs a run through PgBouncer, and this one has none');
    const fromPid = bouncer.pid();
    log(`FAULT PgBouncer: ${f.mode === 'kill' ? 'SIGKILL, then start' : 'clean stop and start'} (pid ${fromPid})`);
    const t0 = Date.now();
    if (f.mode === 'kill' && fromPid !== undefined) {
      process.kill(fromPid, 'SIGKILL');
      await waitFor(`PgBouncer pid ${fromPid} gone`, () => bouncer.pid() === undefined, { timeoutMs: 10_000, intervalMs: 10 });
    }
    // After a SIGKILL there is nothing to stop: restart() only starts it again.
    await bouncer.restart();
    const toPid = bouncer.pid();
    const backMs = Date.now() - t0;
    if (fromPid === undefined || toPid === undefined || toPid === fromPid) {
      log(`PgBouncer: pid ${fromPid} before, ${toPid} after; not counted`);
      return;
    }
    this.mark(f.kind);
    this.pgbouncerRestarts.push({ mode: f.mode, fromPid, toPid, backMs });
    log(`PgBouncer back (pid ${toPid}) after ${backMs} ms`);
  }

  /** Wait (bounded) for a process that exited by itself to be running again. */
  private async running(slot: Slot, what: string): Promise<void> {
    await waitFor(`${what} running`, () => slot.state === 'running', { timeoutMs: 30_000, intervalMs: 50 }).catch(() => undefined);
  }

  private slot(slots: readonly Slot[], index: number, what: string): Slot {
    const slot = slots[index];
    if (!slot) throw new Error(`the schedule names ${what} ${index}, and the run has ${slots.length}`);
    return slot;
  }
}
