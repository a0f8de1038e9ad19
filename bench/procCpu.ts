/**
 * CPU time of processes from /proc (Linux), for the sections that charge CPU to the relay,
 * its Postgres backends, the broker or another system under test (relayCost, debezium).
 *
 * Names kept stable for other sections: TICKS_PER_SECOND, cpuTicks, cpuSeconds,
 * listenerPid, brokerPid, backendPids, CpuMeter.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { brokers } from './common.js';

/** USER_HZ on Linux: /proc/<pid>/stat counts CPU time in these. */
export const TICKS_PER_SECOND = 100;

/** utime + stime of a process in clock ticks, or undefined once it is gone. */
export function cpuTicks(pid: number | 'self'): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may hold spaces and parentheses: utime and
    // stime are fields 14 and 15 of the line, 12 and 13 after the ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

/** utime + stime of a process in seconds, or undefined once it is gone. */
export function cpuSeconds(pid: number | 'self'): number | undefined {
  const t = cpuTicks(pid);
  return t === undefined ? undefined : t / TICKS_PER_SECOND;
}

/** The pid of the process listening on a TCP port, if `ss` can tell. */
export function listenerPid(port: number | string): number | undefined {
  try {
    const out = execFileSync('ss', ['-ltnpH', `sport = :${port}`], { encoding: 'utf8' });
    const m = /pid=(\d+)/.exec(out);
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The pid of the process listening on the (first) broker's port: the java broker. */
export function brokerPid(): number | undefined {
  return listenerPid(brokers()[0]!.split(':').pop()!);
}

/**
 * Pids of the Postgres backends whose application_name is `name` or starts with `name:`
 * (a relay's connections are `<clientId>:<instanceId>[:horizon]`).
 */
export async function backendPids(pool: pg.Pool | pg.ClientBase, name: string): Promise<number[]> {
  const { rows } = await pool.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE application_name = $1 OR left(application_name, length($1) + 1) = $1 || ':'`,
    [name],
  );
  return rows.map((r) => r.pid);
}

/**
 * CPU of a set of processes that may come and go (pool connections), sampled every 250 ms:
 * a pid first seen after start() counts from its birth (its whole life is inside the
 * window). A pid that exits between two samples loses its CPU since the last sample.
 */
export class CpuMeter {
  private readonly first = new Map<number, number>();
  private readonly last = new Map<number, number>();
  private timer: NodeJS.Timeout | undefined;
  private started = false;

  constructor(private readonly pids: () => Promise<number[]> | number[]) {}

  async start(): Promise<void> {
    for (const pid of await this.pids()) {
      const t = cpuTicks(pid);
      if (t !== undefined) this.first.set(pid, t);
    }
    this.started = true;
    this.timer = setInterval(() => void this.sample(), 250);
  }

  private async sample(): Promise<void> {
    let pids: number[];
    try {
      pids = await this.pids();
    } catch {
      return;
    }
    for (const pid of pids) {
      const t = cpuTicks(pid);
      if (t === undefined) continue;
      if (!this.first.has(pid)) this.first.set(pid, this.started ? 0 : t);
      this.last.set(pid, t);
    }
  }

  /** CPU-seconds since start(). */
  async stop(): Promise<number> {
    clearInterval(this.timer);
    await this.sample();
    let ticks = 0;
    for (const [pid, t0] of this.first) ticks += (this.last.get(pid) ?? t0) - t0;
    return ticks / TICKS_PER_SECOND;
  }
}
