/**
 * 7. Cost to the application's writes: pgbench, 4 clients, each transaction inserting one
 * row, rounds alternating arm by arm so that drift of the shared machine hits every arm
 * alike: a plain table (the outbox's columns, defaults and indexes, no relay); the outbox
 * with a relay polling another schema (the wake-up mechanism alone); the outbox with a
 * relay relaying every row (counting the rows Kafka acknowledged meanwhile, to prove it).
 */
import type pg from 'pg';
import { withRelay } from '../children.js';
import { KEYS, PARTITIONS, PAYLOAD, benchSchema, createTopic } from '../common.js';
import { pgbench, tps } from '../pgbench.js';
import { row, type SectionResult } from '../report.js';
import { fmt, log, mean, sleep } from '../util.js';

export interface CostOptions {
  /** Seconds per pgbench run. */
  seconds: number;
  rounds: number;
}

export interface CostData {
  plain: number[];
  polling: number[];
  relaying: number[];
  relayedRows: number[];
  insertedRows: number[];
}

/** Commits/s of 4 pgbench writers, each transaction inserting one row into `table`. */
async function insertTps(schema: string, table: string, topic: string, seconds: number): Promise<number> {
  const script = `\\set k random(1, ${KEYS})\nBEGIN;\nINSERT INTO "${schema}".${table} (topic, key, payload) VALUES ('${topic}', 'key-' || :k, '${PAYLOAD}');\nCOMMIT;\n`;
  return tps(await pgbench(script, ['-c', '4', '-j', '2', '-T', String(seconds)]));
}

export async function cost(pool: pg.Pool, o: CostOptions): Promise<SectionResult<CostData>> {
  const { schema, drop } = await benchSchema(pool, 'benchcost');
  const idle = await benchSchema(pool, 'benchidle');
  const topic = await createTopic(PARTITIONS);
  // The plain table: the outbox's columns, defaults and indexes, and no relay on it.
  await pool.query(`CREATE TABLE "${schema}".plain (LIKE "${schema}".outbox INCLUDING ALL)`);
  const data: CostData = { plain: [], polling: [], relaying: [], relayedRows: [], insertedRows: [] };
  const count = async (): Promise<number> => Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".outbox`)).rows[0]!.n);
  const reset = async (): Promise<void> => {
    // Rows left unsent would make the next relaying arm start with a backlog drain.
    await pool.query(`UPDATE "${schema}".outbox SET sent_at = now() WHERE sent_at IS NULL`);
    await pool.query(`TRUNCATE "${schema}".plain`);
    await pool.query(`VACUUM "${schema}".outbox`);
  };
  const outboxTps = (relaySchema: string): Promise<number> =>
    withRelay(relaySchema, async (relay) => {
      await sleep(1_000); // leases taken, polling
      const before = await count();
      const acked = relay.acks.length;
      const t = await insertTps(schema, 'outbox', topic, o.seconds);
      if (relaySchema === schema) {
        // Proof that this arm relayed: rows acknowledged by Kafka while pgbench ran.
        data.relayedRows.push(relay.acks.length - acked);
        data.insertedRows.push((await count()) - before);
      }
      return t;
    });
  try {
    for (let round = 0; round < o.rounds; round++) {
      data.plain.push(await insertTps(schema, 'plain', topic, o.seconds));
      await reset();
      data.polling.push(await outboxTps(idle.schema));
      await reset();
      data.relaying.push(await outboxTps(schema));
      await reset();
      log(`pgbench round ${round + 1}: plain ${fmt(data.plain.at(-1)!)}, relay polling ${fmt(data.polling.at(-1)!)}, relay relaying ${fmt(data.relaying.at(-1)!)} tps`);
    }
  } finally {
    await drop();
    await idle.drop();
  }
  const plain = mean(data.plain);
  const relayed = data.relayedRows.reduce((a, b) => a + b, 0);
  const inserted = data.insertedRows.reduce((a, b) => a + b, 0);
  return {
    data,
    rows: [
      row('7. cost', `pgbench 4 writers, plain table, no relay (${o.rounds} × ${o.seconds} s, alternating)`, `${fmt(plain)} tps`),
      row('7. cost', 'outbox, relay polling another schema (the wake-up alone)', `${fmt(mean(data.polling))} tps, ${fmt(mean(data.polling) / plain, 2)} ×`),
      row(
        '7. cost',
        `outbox, relay relaying every row (${fmt(relayed)} of ${fmt(inserted)} rows acknowledged by Kafka during the runs)`,
        `${fmt(mean(data.relaying))} tps, ${fmt(mean(data.relaying) / plain, 2)} ×`,
        '≥ 0.95 ×',
        mean(data.relaying) / plain >= 0.95,
      ),
    ],
  };
}
