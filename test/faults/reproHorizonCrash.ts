/**
 * Minimal reproduction: a relay that survives a Postgres crash keeps a visibility-horizon
 * watermark above ids the recovered sequence hands out again.
 *
 *   npx tsx test/faults/reproHorizonCrash.ts [--wal-writer-delay-ms N]
 *
 * Why it can happen. nextval() WAL-logs the sequence only every 32 values, and that record
 * reaches disk only when some later commit flushes the WAL (a rollback does not flush). A
 * transaction takes ids past the last logged value and rolls back; the horizon probe sees
 * the sequence's live last_value L and, the transaction being over, releases ids <= L;
 * then Postgres crashes before anything flushes the WAL. Recovery restores the sequence
 * from the last record that reached disk, below L, and ids <= L are taken again by new
 * transactions, which the surviving relay may claim at once (they are below its
 * watermark) in any commit order: a key's later id can be published before an earlier one
 * whose transaction is still open.
 *
 * The window is short in production (until the WAL writer's next flush, wal_writer_delay,
 * 200 ms by default, or any other transaction's commit); --wal-writer-delay-ms widens it.
 * Uses the relay's own Horizon class and the claim condition (id <= watermark) against a
 * Postgres instance of its own (servers.ts: the fault suite's, deleted on the way out even
 * on SIGINT).
 */
import pg from 'pg';
import { migrate } from '../../src/commands/migrate.js';
import { Horizon } from '../../src/relay/horizon.js';
import { startOwnPostgres } from './servers.js';

const arg = process.argv.indexOf('--wal-writer-delay-ms');
const walWriterDelayMs = arg > 0 ? Number(process.argv[arg + 1]) : 200;
const schema = 'repro';
const say = (line: string): void => void process.stdout.write(`${line}\n`);

const server = await startOwnPostgres({ settings: { wal_writer_delay: `${walWriterDelayMs}ms` } });
let reproduced = false;
try {
  await migrate({ databaseUrl: server.url, schema });
  const connect = async (): Promise<pg.Client> => {
    const c = new pg.Client({ connectionString: server.url });
    c.on('error', () => undefined);
    await c.connect();
    return c;
  };
  const insert = `INSERT INTO ${schema}.outbox (topic, key) VALUES ('t', $1) RETURNING id`;

  // 1. One committed row: its commit flushes the sequence's WAL record (logged 32 ahead).
  let app = await connect();
  await app.query(insert, ['k']);
  // 2. A transaction takes ids past the logged value, then rolls back (no WAL flush).
  await app.query('BEGIN');
  for (let i = 0; i < 40; i++) await app.query(insert, ['other']);
  await app.query('ROLLBACK');
  // 3. The relay's horizon releases everything up to the sequence's last value.
  let probe = await connect();
  await probe.query('SET synchronous_commit = off');
  const horizon = new Horizon(`"${schema}"`, 60_000);
  await horizon.probe(probe);
  await horizon.probe(probe);
  const watermark = horizon.watermark;
  const { rows: beforeRows } = await app.query<{ last_value: string }>(`SELECT last_value FROM ${schema}.outbox_id_seq`);
  say(`before the crash: sequence last value = ${beforeRows[0]?.last_value}, watermark = ${watermark}`);
  // 4. Postgres crashes at once (no checkpoint); the relay process lives on.
  await app.end().catch(() => undefined);
  await probe.end().catch(() => undefined);
  await server.restart('immediate');
  app = await connect();
  probe = await connect();
  const { rows } = await app.query<{ last_value: string }>(`SELECT last_value FROM ${schema}.outbox_id_seq`);
  say(`after the crash: sequence last value = ${rows[0]?.last_value}; the relay's watermark is still ${horizon.watermark}`);

  // 5. Two writers of key k: A takes the lower id and stays open, B takes the next and commits.
  const a = await connect();
  await a.query('BEGIN');
  const idA = Number((await a.query<{ id: string }>(insert, ['k'])).rows[0]?.id);
  const b = await connect();
  await b.query('BEGIN');
  const idB = Number((await b.query<{ id: string }>(insert, ['k'])).rows[0]?.id);
  await b.query('COMMIT');
  // 6. What the relay may claim now (the claim condition: unsent and id <= watermark).
  await horizon.probe(probe).catch(() => false);
  const claimable = await app.query<{ id: string }>(
    `SELECT id FROM ${schema}.outbox WHERE sent_at IS NULL AND key = 'k' AND id > 1 AND id <= $1 ORDER BY id`,
    [horizon.watermark],
  );
  const ids = claimable.rows.map((r) => Number(r.id));
  say(`key k: A holds id ${idA} (transaction open), B committed id ${idB}; claimable now below watermark ${horizon.watermark}: [${ids.join(', ')}]`);
  reproduced = idA < idB && idB <= horizon.watermark && ids.includes(idB);
  say(
    reproduced
      ? `REPRODUCED: id ${idB} of key k can be published before id ${idA} of the same key, whose transaction is still open`
      : 'not reproduced: the recovered sequence did not hand out ids below the watermark',
  );
  await a.query('COMMIT');
  for (const c of [a, b, app, probe]) await c.end().catch(() => undefined);
} finally {
  await server.destroy();
}
process.exit(reproduced ? 1 : 0);
