/** pgbench (C, so the load generator takes little of the cores) with a script of ours. */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATABASE_URL } from './common.js';

/**
 * Runs pgbench on `script` against `databaseUrl` (default the bench's DATABASE_URL);
 * resolves with its output (async: the children's pipes keep flowing).
 */
export async function pgbench(script: string, options: string[], databaseUrl = DATABASE_URL): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-bench-'));
  const file = join(dir, 'script.sql');
  writeFileSync(file, script);
  const url = new URL(databaseUrl);
  const proc = spawn('pgbench', ['-n', ...options, '-f', file, '-h', url.hostname, '-p', url.port || '5432', '-U', decodeURIComponent(url.username) || 'postgres', url.pathname.slice(1)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const code = await new Promise<number | null>((r) => proc.on('exit', r));
  if (code !== 0) throw new Error(`pgbench exited with ${code}:\n${out}`);
  return out;
}

/** The `tps = …` pgbench reports. */
export function tps(out: string): number {
  const m = /tps = ([\d.]+)/.exec(out);
  if (!m) throw new Error(`pgbench output not understood:\n${out}`);
  return Number(m[1]);
}
