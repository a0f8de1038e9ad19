/**
 * Exact CPU of a Postgres cluster's processes over a window, by kind (autovacuum workers,
 * the backends of named connections), from /proc, for the retention section.
 *
 * Sampling a process's /proc/<pid>/stat misses whatever it spends after its last sample,
 * and all of a process that lives and dies between two samples: most autovacuum workers
 * of a small table do. The kernel keeps that CPU anyway: when the postmaster reaps a child,
 * the child's utime + stime are added to the postmaster's cutime + cstime
 * (/proc/<postmaster>/stat fields 16 and 17, kept in nanoseconds and reported in ticks).
 * So a child's CPU in the window is
 *
 *   (its ticks at the end, or what its reaping added to cutime + cstime)
 *   − (its ticks at the start, or 0 when it was born in the window),
 *
 * exact for every child whatever its life, provided each reaping is told apart from the
 * others. The meter polls the postmaster every `pollMs` (its reaped ticks and children
 * list, read again until they agree): the jump of cutime + cstime since the last poll
 * belongs to the children that left its children list since then.
 *
 * A child's kind comes from its process title (`autovacuum worker`, `parallel worker`),
 * else from name() (a backend, by the caller's pg_stat_activity), else `other`. Two kinds
 * are children too short-lived to be identified: `unseen`, a jump with no child gone (born
 * and reaped between two polls), and `untitled`, a child seen only before it set its title
 * or only as a zombie. The caller arranges that only autovacuum workers can be that short
 * (bench/retentionArm.ts). A jump shared by children of different kinds is split by their
 * last polled ticks (then up to `pollMs` of one child's CPU may be charged to another
 * kind): `mixed` counts those polls.
 */
import { readFileSync } from 'node:fs';
import { TICKS_PER_SECOND, cpuTicks } from './procCpu.js';

/** utime + stime of the children the process has reaped (cutime + cstime), in ticks. */
export function reapedTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[13]) + Number(fields[14]);
}

function children(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
}

function cmdline(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return undefined;
  }
}

/** What a meter measured: CPU-seconds and reaped children per kind. */
export interface PostmasterCpu {
  seconds: Record<string, number>;
  exits: Record<string, number>;
  /** Polls whose jump was shared by children of different kinds (split by their last polled ticks). */
  mixed: number;
  /** Titles of the children of kind `other` or `untitled` that exited: what they were. */
  otherTitles: string[];
}

export class PostmasterCpuMeter {
  private readonly startTicks = new Map<number, number>();
  private readonly lastTicks = new Map<number, number>();
  /** Kinds settled from the process title (workers) or given by the caller (backends). */
  private readonly titled = new Map<number, string | undefined>();
  private readonly named = new Map<number, string>();
  private readonly titles = new Map<number, string>();
  private readonly goneOthers: string[] = [];
  private readonly ticks = new Map<string, number>();
  private readonly exits = new Map<string, number>();
  private mixed = 0;
  private previous: { reaped: number; children: Set<number> } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly postmasterTitle: string;

  /** `kindOfTitle` names a child by its process title, or returns undefined (then the caller's name(), else `other`). */
  constructor(
    private readonly postmasterPid: number,
    private readonly pollMs = 20,
    private readonly kindOfTitle: (title: string) => string | undefined = defaultKindOfTitle,
  ) {
    this.postmasterTitle = cmdline(postmasterPid) ?? '';
  }

  /** Name a backend's kind (e.g. from pg_stat_activity.application_name); may be called any time before it exits. */
  name(pid: number, kind: string): void {
    this.named.set(pid, kind);
  }

  private kind(pid: number): string {
    // A child seen only before it set its title or after its exit: `untitled`.
    return this.titled.get(pid) ?? this.named.get(pid) ?? (this.titled.has(pid) ? 'other' : 'untitled');
  }

  private add(map: Map<string, number>, kind: string, n: number): void {
    map.set(kind, (map.get(kind) ?? 0) + n);
  }

  /**
   * The postmaster's reaped ticks and children list, read so that they agree: a child
   * reaped while the list is read changes the ticks, and the read is tried again.
   */
  private snapshot(): { reaped: number; children: Set<number> } {
    for (;;) {
      const before = reapedTicks(this.postmasterPid);
      const list = children(this.postmasterPid);
      for (const pid of list) {
        const t = cpuTicks(pid);
        if (t !== undefined) this.lastTicks.set(pid, t);
        if (!this.titled.has(pid)) {
          // A child just forked still shows the postmaster's title, and one that has exited
          // (a zombie until reaped) shows none: look again next poll.
          const title = cmdline(pid);
          if (title !== undefined && title !== '' && title !== this.postmasterTitle) {
            this.titled.set(pid, this.kindOfTitle(title));
            this.titles.set(pid, title);
          }
        }
      }
      if (reapedTicks(this.postmasterPid) === before) return { reaped: before, children: new Set(list) };
    }
  }

  start(): void {
    const s = this.snapshot();
    for (const pid of s.children) this.startTicks.set(pid, this.lastTicks.get(pid) ?? 0);
    this.previous = s;
    this.timer = setInterval(() => this.poll(), this.pollMs);
  }

  private poll(): void {
    const prev = this.previous!;
    const s = this.snapshot();
    const jump = s.reaped - prev.reaped;
    const gone = [...prev.children].filter((pid) => !s.children.has(pid));
    this.previous = s;
    if (gone.length === 0) {
      if (jump > 0) this.add(this.ticks, 'unseen', jump);
      return;
    }
    const kinds = [...new Set(gone.map((pid) => this.kind(pid)))];
    for (const pid of gone) this.add(this.exits, this.kind(pid), 1);
    for (const pid of gone.filter((p) => this.kind(p) === 'other' || this.kind(p) === 'untitled')) this.goneOthers.push(this.titles.get(pid) ?? '(untitled)');
    const start = (pid: number): number => this.startTicks.get(pid) ?? 0;
    if (kinds.length > 1) this.mixed++;
    // One kind: the whole jump is its children's. Several: every kind but the first by its
    // children's last polled ticks, and the first gets the rest of the jump.
    let rest = jump;
    for (const pid of gone) {
      if (this.kind(pid) === kinds[0]) {
        rest -= start(pid);
      } else {
        const last = this.lastTicks.get(pid) ?? start(pid);
        this.add(this.ticks, this.kind(pid), last - start(pid));
        rest -= last;
      }
    }
    this.add(this.ticks, kinds[0]!, rest);
    for (const pid of gone) {
      this.startTicks.delete(pid);
      this.lastTicks.delete(pid);
    }
  }

  /** Stops polling; the children still alive count up to now. */
  stop(): PostmasterCpu {
    clearInterval(this.timer);
    this.poll();
    for (const pid of this.previous!.children) this.add(this.ticks, this.kind(pid), (this.lastTicks.get(pid) ?? 0) - (this.startTicks.get(pid) ?? 0));
    const seconds: Record<string, number> = {};
    for (const [k, t] of this.ticks) seconds[k] = t / TICKS_PER_SECOND;
    return { seconds, exits: Object.fromEntries(this.exits), mixed: this.mixed, otherTitles: this.goneOthers };
  }
}

/** Workers by their title; a backend's title ("postgres: user db host(port) state") names no kind. */
export function defaultKindOfTitle(title: string): string | undefined {
  if (title.includes('autovacuum worker')) return 'autovacuum';
  if (title.includes('parallel worker')) return 'parallel worker';
  if (title.includes('autovacuum launcher')) return 'autovacuum launcher';
  return undefined;
}
