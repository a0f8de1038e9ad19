import { randomBytes } from 'node:crypto';
import { OutboxError } from '../../shared/errors.js';
import type { ReplayProgress, ReplayResult } from '../../commands/deadLetters.js';

// Replays run as jobs inside the console process: a replay of 200 dead letters at 20/s
// takes 10 s, longer than a request should. The page that started one follows it (done of
// total, rate) and an operator may cancel it through its signal; rows moved stay moved.
// At most one replay runs per outbox at a time: two at once would add up their rates,
// the very burst a throttled replay is meant to avoid.

export type JobStatus = 'running' | 'done' | 'stopped' | 'failed';

/** A replay started from the console. */
export interface ReplayJob {
  readonly id: string;
  readonly outbox: string;
  readonly user: string;
  /** What was selected, for people (the filter or the ids). */
  readonly selection: string;
  /** Rows per second asked for. */
  readonly rate: number;
  /** How many the operator confirmed (the dry-run count); the replay's limit. */
  readonly expected: number;
  readonly startedAt: Date;
  status: JobStatus;
  /** Dead letters handled so far (moved or left in place). */
  done: number;
  moved: number;
  notMoved: number;
  finishedAt: Date | null;
  /** Set when it finished (not when it failed). */
  result: ReplayResult | null;
  /** Why it failed, for people (never a connection string). */
  error: string | null;
  /** The error itself, for the caller that maps it to a status (a missing privilege: 403). */
  cause: unknown;
  cancelledBy: string | null;
  firstMoveAtMs: number | null;
  lastMoveAtMs: number | null;
}

/** Job progress as the job page's script reads it. */
export interface JobProgress {
  id: string;
  status: JobStatus;
  expected: number;
  done: number;
  moved: number;
  notMoved: number;
  /** Rows moved per second so far, or null before two moves. */
  ratePerSecond: number | null;
  elapsedSeconds: number;
}

interface Running {
  job: ReplayJob;
  abort: AbortController;
  settled: Promise<void>;
}

/** A replay was asked for while another runs on the same outbox. */
export class ReplayRunningError extends OutboxError {
  constructor(readonly job: ReplayJob) {
    super(`a replay is running on outbox ${job.outbox} (started by ${job.user}); wait for it or cancel it`, { retriable: true, context: { job: job.id } });
  }
}

/** How many finished jobs are kept to be looked at, per console. */
const KEEP_FINISHED = 100;

/** The console's replay jobs. */
export class JobRegistry {
  private readonly jobs = new Map<string, ReplayJob>();
  private readonly running = new Map<string, Running>();

  /** The running replay of an outbox, if any. */
  runningOn(outbox: string): ReplayJob | undefined {
    for (const r of this.running.values()) if (r.job.outbox === outbox) return r.job;
    return undefined;
  }

  get(id: string): ReplayJob | undefined {
    return this.jobs.get(id);
  }

  /** The jobs of an outbox, newest first. */
  list(outbox: string): ReplayJob[] {
    return [...this.jobs.values()].filter((j) => j.outbox === outbox).reverse();
  }

  /**
   * Start a replay. `run` gets the job's signal and progress callback (those of
   * replayDeadLetters). Resolves once the first row was handled, or the job ended (it
   * may have failed before moving anything: a missing privilege), or after `waitMs`.
   */
  async start(
    spec: { outbox: string; user: string; selection: string; rate: number; expected: number },
    run: (signal: AbortSignal, onProgress: (p: ReplayProgress) => void) => Promise<ReplayResult>,
    { waitMs = 3_000, onEnd }: { waitMs?: number; onEnd?: (job: ReplayJob) => void } = {},
  ): Promise<ReplayJob> {
    const other = this.runningOn(spec.outbox);
    if (other) throw new ReplayRunningError(other);
    const job: ReplayJob = {
      id: randomBytes(9).toString('base64url'),
      ...spec,
      startedAt: new Date(),
      status: 'running',
      done: 0,
      moved: 0,
      notMoved: 0,
      finishedAt: null,
      result: null,
      error: null,
      cause: null,
      cancelledBy: null,
      firstMoveAtMs: null,
      lastMoveAtMs: null,
    };
    this.jobs.set(job.id, job);
    this.forgetOld();
    const abort = new AbortController();
    let firstStep!: () => void;
    const stepped = new Promise<void>((resolve) => (firstStep = resolve));
    const onProgress = (p: ReplayProgress): void => {
      job.done++;
      if (p.moved) {
        job.moved++;
        job.firstMoveAtMs ??= p.atMs;
        job.lastMoveAtMs = p.atMs;
      } else job.notMoved++;
      firstStep();
    };
    const settled = run(abort.signal, onProgress).then(
      (result) => {
        job.result = result;
        job.status = result.stopped ? 'stopped' : 'done';
      },
      (error: unknown) => {
        job.status = 'failed';
        job.cause = error;
        job.error = error instanceof Error ? error.message : String(error);
      },
    ).finally(() => {
      job.finishedAt = new Date();
      this.running.delete(job.id);
      firstStep();
      onEnd?.(job);
    });
    this.running.set(job.id, { job, abort, settled });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([stepped, new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)))]);
    clearTimeout(timer);
    return job;
  }

  /** Ask a running job to stop between two rows; false when it is not running. */
  cancel(id: string, by: string): boolean {
    const r = this.running.get(id);
    if (!r) return false;
    r.job.cancelledBy = by;
    r.abort.abort();
    return true;
  }

  /** Stop every running job and wait for them, at most `timeoutMs`. */
  async stopAll(timeoutMs: number): Promise<void> {
    const all = [...this.running.values()];
    for (const r of all) r.abort.abort();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(all.map((r) => r.settled)), new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }

  private forgetOld(): void {
    const finished = [...this.jobs.values()].filter((j) => j.status !== 'running');
    for (const j of finished.slice(0, Math.max(0, finished.length - KEEP_FINISHED))) this.jobs.delete(j.id);
  }
}

/** A job's progress, as the job page and its script show it. */
export function progressOf(job: ReplayJob, nowMs = Date.now()): JobProgress {
  const span = job.firstMoveAtMs !== null && job.lastMoveAtMs !== null ? job.lastMoveAtMs - job.firstMoveAtMs : 0;
  return {
    id: job.id,
    status: job.status,
    expected: job.result?.selected ?? job.expected,
    done: job.done,
    moved: job.moved,
    notMoved: job.notMoved,
    ratePerSecond: job.result?.ratePerSecond ?? (span > 0 ? ((job.moved - 1) * 1000) / span : null),
    elapsedSeconds: ((job.finishedAt?.getTime() ?? nowMs) - job.startedAt.getTime()) / 1000,
  };
}
