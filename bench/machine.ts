/** Facts about the machine a run measured on, and how loaded it was (it is shared). */
import type pg from 'pg';
import { cpus, loadavg, totalmem } from 'node:os';
import { brokers } from './common.js';

/** The 1-minute load average, to one decimal. */
export function load1(): number {
  return Math.round(loadavg()[0]! * 10) / 10;
}

export interface Machine {
  cpus: number;
  cpuModel: string | undefined;
  memoryGiB: number;
  node: string;
  postgres: string | undefined;
  kafkaBrokers: string[];
}

export async function machine(pool: pg.Pool): Promise<Machine> {
  const { rows } = await pool.query<{ v: string }>('SELECT current_setting($$server_version$$) AS v');
  return { cpus: cpus().length, cpuModel: cpus()[0]?.model, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.version, postgres: rows[0]?.v, kafkaBrokers: brokers() };
}
