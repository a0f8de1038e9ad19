/**
 * An outbox writer held open for a long time (default 5 minutes: a transaction that
 * inserted an outbox row and has not committed) while rows are enqueued once a second: how
 * long each row waits before the relay publishes it. The horizon holds rows back behind the
 * open writer for at most --horizon-max-wait-ms (here 10 s), then releases them and logs
 * it. (A transaction that never wrote the outbox holds nothing back: src/relay/horizon.ts.)
 *
 *   scripts/with-kafka.sh npx tsx bench/longTransaction.ts [minutes] [waitMs]
 */
import pg from 'pg';
import { createRelay } from '../src/relay/relay.js';
import { DATABASE_URL, benchSchema, brokers, createTopic } from './common.js';
import { percentile } from './util.js';

const MINUTES = Number(process.argv[2] ?? 5);
const WAIT_MS = Number(process.argv[3] ?? 10_000);
const pool = new pg.Pool({ connectionString: DATABASE_URL });
const { schema, drop } = await benchSchema(pool, 'benchlongtx');
const topic = await createTopic(1);

const relay = createRelay({ databaseUrl: DATABASE_URL, kafkaBrokers: brokers(), schema, horizonMaxWaitMs: WAIT_MS });
const insertedAt = new Map<number, number>();
const delays: number[] = [];
let forced = 0;
relay.on('horizon', (h) => void (h.forced && forced++));
relay.on('batch', (b) => {
  const now = Date.now();
  for (let id = b.firstId; id <= b.lastId; id++) {
    const t = insertedAt.get(id);
    if (t !== undefined) delays.push(now - t);
  }
});
await relay.start();

const longTx = await pool.connect();
await longTx.query('BEGIN');
await longTx.query(`INSERT INTO "${schema}".outbox (topic, key) VALUES ($1, 'open') RETURNING id`, [topic]);
const openedAt = Date.now();
console.log(`outbox writer open; enqueueing a row every second for ${MINUTES} min (wait ${WAIT_MS} ms)`);
while (Date.now() - openedAt < MINUTES * 60_000) {
  const { rows } = await pool.query<{ id: number }>(`INSERT INTO "${schema}".outbox (topic, key) VALUES ($1, 'k') RETURNING id`, [topic]);
  insertedAt.set(Number(rows[0]!.id), Date.now());
  await new Promise((r) => setTimeout(r, 1_000));
}
const heldMs = Date.now() - openedAt;
while (delays.length < insertedAt.size) await new Promise((r) => setTimeout(r, 100));
await longTx.query('ROLLBACK');
longTx.release();
await relay.stop();
await drop();
await pool.end();
delays.sort((a, b) => a - b);
console.log(
  `transaction held open ${(heldMs / 1000).toFixed(0)} s; ${delays.length} rows; publish delay p50 ${percentile(delays, 50)} ms, ` +
    `p99 ${percentile(delays, 99)} ms, max ${delays[delays.length - 1]} ms (configured wait ${WAIT_MS} ms); forced releases ${forced}`,
);
