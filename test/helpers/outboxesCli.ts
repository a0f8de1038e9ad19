import { after } from 'node:test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { DATABASE_URL, uniqueName } from './db.js';
import { testBrokers } from './kafka.js';
import { spawnCli } from './processes.js';

/**
 * `outbox-relay` over a list of two outboxes (`one`, `two`, schemas of their own), for a
 * test file: the outboxes file, an admin pool, and `cli` to run a command with both
 * outboxes' URLs in the environment. The URLs carry a password (trust auth ignores it) so
 * that a test can check it never reaches the output. The schemas are dropped after the file.
 */
export function outboxesCli(): {
  SECRET: string;
  URL_WITH_PASSWORD: string;
  schemas: string[];
  admin: pg.Pool;
  file: string;
  env(extra?: Record<string, string>): Record<string, string>;
  cli(args: string[], extra?: Record<string, string>): Promise<{ code: number | string; output: string }>;
} {
  const SECRET = 'pw-never-logged-7f3a';
  const u = new URL(DATABASE_URL);
  u.username = u.username || 'postgres';
  u.password = SECRET;
  const URL_WITH_PASSWORD = u.toString();
  const schemas = [uniqueName('cli_one'), uniqueName('cli_two')];
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const file = join(mkdtempSync(join(tmpdir(), 'outboxes-')), 'outboxes.json');
  writeFileSync(file, JSON.stringify({ outboxes: [{ name: 'one', databaseUrlEnv: 'ONE_URL', schema: schemas[0] }, { name: 'two', databaseUrlEnv: 'TWO_URL', schema: schemas[1] }] }));
  after(async () => {
    for (const s of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    await admin.end();
  });
  const env = (extra: Record<string, string> = {}): Record<string, string> => ({ ONE_URL: URL_WITH_PASSWORD, TWO_URL: URL_WITH_PASSWORD, KAFKA_BROKERS: testBrokers().join(','), ...extra });
  const cli = async (args: string[], extra: Record<string, string> = {}): Promise<{ code: number | string; output: string }> => {
    const p = spawnCli(args, env(extra));
    const code = await p.exited;
    return { code, output: p.output() };
  };
  return { SECRET, URL_WITH_PASSWORD, schemas, admin, file, env, cli };
}
