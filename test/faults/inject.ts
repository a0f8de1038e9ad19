/**
 * Fault injection: carries out a schedule's faults (schedule.ts) against the processes
 * and servers of a run, and counts each fault it completed, by kind, for the report and
 * the self-check. A fault that fails, or finds nothing to act on (no process to kill, a
 * joining consumer never assigned partitions), is logged and not counted, so the
 * self-check notices it.
 */
import { waitFor } from '../helpers/wait.js';
import { describeFault, type Fault, type FaultKind } from './schedule.js';
import type { Slot } from './processes.js';
import type { Servers } from './servers.js';

export interface InjectTargets {
  servers: Servers;
  relays: readonly Slot[];
  consumers: readonly Slot[];
  /** A new consumer process (not started yet), for a consumer joining the group. */
  extraConsumer(): Slot;
  log(line: string): void;
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
  /** When the last fault was over (restart done, pause over). */
  lastFaultEndAt = Date.now();
  /** Infrastructure restarts never overlap each other. */
  private infra: Promise<void> = Promise.resolve();

  constructor(private readonly t: InjectTargets) {}

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

  private exclusiveInfra(fn: () => Promise<void>): Promise<void> {
    const result = this.infra.then(fn);
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
          log(`FAULT relay ${f.relay}: SIGKILL (restart in ${f.downMs} ms)`);
          if (await slot.kill()) this.mark(f.kind);
          else log(`relay ${f.relay}: no process to kill; not counted`);
          await sleep(f.downMs);
          slot.start();
        });
        break;
      }
      case 'relay-pause': {
        const slot = this.slot(this.t.relays, f.relay, 'relay');
        await slot.exclusive(async () => {
          await this.running(slot, `relay ${f.relay}`);
          log(`FAULT relay ${f.relay}: SIGSTOP for ${f.pauseMs} ms`);
          if (slot.pause()) this.mark(f.kind);
          else log(`relay ${f.relay}: not running; pause not counted`);
          await sleep(f.pauseMs);
          slot.resume();
          log(`relay ${f.relay}: SIGCONT`);
        });
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
      case 'postgres-restart':
        await this.exclusiveInfra(async () => {
          log(`FAULT Postgres: restart (${f.mode})`);
          const t = Date.now();
          await servers.postgres.restart(f.mode);
          this.mark(f.kind);
          log(`Postgres back after ${Date.now() - t} ms`);
        });
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
        // a process that had not got that far before it left would rebalance nothing.
        const joined = await waitFor(`${slot.o.name} assigned partitions`, () => (slot.events.assigned ?? 0) > 0, { timeoutMs: 30_000, intervalMs: 50 }).catch(() => false);
        if (joined) this.mark(f.kind);
        else log(`${slot.o.name}: no partitions assigned within 30 s; not counted`);
        await sleep(f.stayMs);
        log(`${slot.o.name}: leaves the group (SIGTERM)`);
        await slot.stop(20_000);
        break;
      }
    }
    this.lastFaultEndAt = Math.max(this.lastFaultEndAt, Date.now());
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
