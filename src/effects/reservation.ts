/**
 * A reservation held while its effect runs: renewed every third of `reservationMs`, so a
 * slow effect keeps the key and no duplicate runs it meanwhile; and given up, with the
 * effect's signal aborted, as soon as it may have been lost: a renewal that finds another
 * token (the reservation expired and was taken over), or no successful renewal before
 * the reservation's time runs out on this process's clock.
 *
 * That local deadline is counted from when the last successful reserve or renew was
 * *sent*: the store set the expiry from a moment no earlier than that, so the local
 * deadline passes first and the holder never believes in a reservation the store has
 * already let expire (clock rates aside).
 */
import { EffectReservationLostError } from './errors.js';
import type { EffectRecorder } from './metrics.js';
import type { EffectStore } from './store.js';

export class HeldReservation {
  private readonly controller = new AbortController();
  private deadline: number;
  private renewTimer: NodeJS.Timeout | undefined;
  private deadlineTimer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private stopped = false;
  /** True once the reservation may have been lost (the signal is aborted then). */
  lost = false;

  constructor(
    private readonly store: EffectStore,
    private readonly key: string,
    private readonly token: string,
    private readonly o: { reservationMs: number; ttlMs: number },
    reserveSentAt: number,
    private readonly metrics: EffectRecorder,
  ) {
    this.deadline = reserveSentAt + o.reservationMs;
    this.armDeadline();
    this.scheduleRenewal();
  }

  /** Aborted (reason: EffectReservationLostError) when the reservation may have been lost. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Stops renewing, and waits for a renewal in flight (so nothing renews after a confirm or a release). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.deadlineTimer);
    await this.renewing;
  }

  /** Counts and announces a loss the confirm found (a loss the renewals already saw is not counted twice). */
  lostAtConfirm(): void {
    if (this.lost) return;
    this.lost = true;
    this.metrics.reservation('lost');
  }

  private scheduleRenewal(): void {
    this.renewTimer = setTimeout(() => {
      this.renewing = this.renew().finally(() => {
        this.renewing = undefined;
        if (!this.stopped && !this.lost) this.scheduleRenewal();
      });
    }, Math.max(1, Math.floor(this.o.reservationMs / 3)));
    this.renewTimer.unref();
  }

  private async renew(): Promise<void> {
    const sentAt = performance.now();
    let held: boolean;
    try {
      held = await this.store.renew(this.key, this.token, this.o);
    } catch {
      // The deadline timer decides whether the reservation is lost; the next renewal may pass.
      if (!this.stopped) this.metrics.storeError('renew');
      return;
    }
    if (this.stopped || this.lost) return;
    if (!held) {
      this.lose('it expired and another attempt took it over, or it was forgotten');
      return;
    }
    this.deadline = sentAt + this.o.reservationMs;
    this.armDeadline();
  }

  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = setTimeout(() => this.lose(`no renewal reached the store within reservationMs (${this.o.reservationMs} ms)`), Math.max(0, this.deadline - performance.now()));
    this.deadlineTimer.unref();
  }

  private lose(why: string): void {
    if (this.lost || this.stopped) return;
    this.lost = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.deadlineTimer);
    this.metrics.reservation('lost');
    this.controller.abort(new EffectReservationLostError(this.key, why));
  }
}
