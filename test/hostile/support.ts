/**
 * What the hostile-input suite (test/hostile.integration.test.ts, cases in cases.ts) needs
 * around each case: the CLI as a process, snapshots of a schema's tables and of a topic
 * (to show a case changed nothing, or only what it should), and a small pool to run the
 * cases a few at a time. Real servers only: the shared Postgres and broker.
 */
import pg from 'pg';
import { spawnCli, type Spawned } from '../helpers/processes.js';
import type { Admin } from 'kafkajs';
import { testBrokers, testKafka } from '../helpers/kafka.js';

/** What a CLI run printed and how it ended. */
export interface CliOutcome {
  code: number | string;
  /** Non-empty output lines (stdout and stderr). */
  lines: string[];
  output: string;
}

export async function runCli(args: string[], env: Record<string, string | undefined>, timeoutMs = 60_000): Promise<CliOutcome> {
  const p = spawnCli(args, { KAFKA_BROKERS: testBrokers().join(','), ...env });
  return finish(p, timeoutMs);
}

export async function finish(p: Spawned, timeoutMs = 60_000): Promise<CliOutcome> {
  const timer = setTimeout(() => p.child.kill('SIGKILL'), timeoutMs);
  const code = await p.exited;
  clearTimeout(timer);
  const output = p.output();
  return { code, output, lines: output.split('\n').filter((l) => l.trim() !== '') };
}

/** Content hash and row count of every table of a schema. */
export async function snapshotSchema(pool: pg.Pool, schema: string): Promise<Record<string, string>> {
  const { rows: tables } = await pool.query<{ tablename: string }>('SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1', [schema]);
  const out: Record<string, string> = {};
  for (const { tablename } of tables) {
    const { rows } = await pool.query<{ h: string; n: number }>(
      `SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS h, count(*)::int AS n FROM "${schema}"."${tablename}" t`,
    );
    out[tablename] = `${rows[0]!.n} rows ${rows[0]!.h}`;
  }
  return out;
}

/** Which of `names` exist as schemas (other tests create and drop their own meanwhile,
 *  so only the names a case's inputs could have created are compared). */
export async function ownSchemas(pool: pg.Pool, names: string[]): Promise<string[]> {
  const { rows } = await pool.query<{ nspname: string }>('SELECT nspname FROM pg_namespace WHERE nspname = ANY($1) ORDER BY 1', [names]);
  return rows.map((r) => r.nspname);
}

let sharedAdmin: Promise<Admin> | undefined;

/** Sum of the high watermarks of a topic: how many messages it ever got. One admin
 *  client for the whole suite (closeAdmin() at the end): a connect per call costs more
 *  than the call on a loaded box. */
export async function topicSize(topic: string): Promise<number> {
  sharedAdmin ??= (async () => {
    const admin = testKafka().admin();
    await admin.connect();
    return admin;
  })();
  const offsets = await (await sharedAdmin).fetchTopicOffsets(topic);
  return offsets.reduce((n, o) => n + Number(o.high), 0);
}

export async function closeAdmin(): Promise<void> {
  const admin = sharedAdmin;
  sharedAdmin = undefined;
  await (await admin)?.disconnect().catch(() => undefined);
}

/** Run `tasks` at most `width` at a time; resolves with every result or rejection, in order. */
export async function pooled<T>(width: number, tasks: Array<() => Promise<T>>): Promise<Array<PromiseSettledResult<T>>> {
  const results: Array<PromiseSettledResult<T>> = new Array(tasks.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++;
      if (i >= tasks.length) return;
      try {
        results[i] = { status: 'fulfilled', value: await tasks[i]!() };
      } catch (reason) {
        results[i] = { status: 'rejected', reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, tasks.length) }, worker));
  return results;
}
