/**
 * 6. A peer: pg-transactional-outbox (npm), polling listener, its own DatabaseSetup SQL,
 * rows over many keys (segment = key), publishing through its documented extension point,
 * the message publisher, here a kafkajs send with acks=all per message (the library hands
 * over one message at a time), to the same broker; batch 5 (its default) and 50; rows/s
 * until done or cut off. Our relay on the same size of backlog.
 */
import type pg from 'pg';
import { Partitioners } from 'kafkajs';
import { HEADERS } from '../../src/shared/kafka.js';
import { DATABASE_URL, KEYS, PARTITIONS, createTopic, kafka, name } from '../common.js';
import { relayDrain } from '../relayDrain.js';
import { row, type SectionResult } from '../report.js';
import { fmt, sleep, wall } from '../util.js';

export interface PeerOptions {
  rows: number;
  /** Cut-off per peer run. */
  seconds: number;
}

interface PeerRun {
  rowsPerSecond: number;
  done: number;
  abandoned: number;
  seconds: number;
  finished: boolean;
}

export interface PeerData {
  rows: number;
  ours: number;
  batch5: PeerRun;
  batch50: PeerRun;
}

async function peerRun(pool: pg.Pool, batchSize: number, total: number, cutOffSeconds: number): Promise<PeerRun> {
  const lib = await import('pg-transactional-outbox');
  const schema = name('benchpeer');
  const setup = { outboxOrInbox: 'outbox' as const, database: new URL(DATABASE_URL).pathname.slice(1), schema, table: 'outbox', listenerRole: 'postgres', nextMessagesSchema: schema, nextMessagesName: 'next_outbox_messages' };
  const client = await pool.connect();
  try {
    // Its setup drops indexes by unqualified name: keep it inside its own schema.
    await client.query(`CREATE SCHEMA "${schema}"`);
    await client.query(`SET search_path = "${schema}"`);
    await client.query(lib.DatabaseSetup.dropAndCreateTable(setup));
    await client.query(lib.DatabaseSetup.createPollingFunction(setup));
    await client.query(lib.DatabaseSetup.setupPollingIndexes(setup));
    await client.query('RESET search_path');
    await client.query(
      `INSERT INTO "${schema}".outbox (id, aggregate_type, aggregate_id, message_type, segment, payload, created_at)
       SELECT gen_random_uuid(), 'order', 'key-' || (i % $1), 'order_updated', 'key-' || (i % $1),
              jsonb_build_object('i', i, 'type', 'order_updated', 'pad', repeat('x', 150)), clock_timestamp()
         FROM generate_series(0, $2 - 1) AS i`,
      [KEYS, total],
    );
    await client.query(`VACUUM ANALYZE "${schema}".outbox`);
  } finally {
    client.release();
  }
  const topic = await createTopic(PARTITIONS);
  const producer = kafka().producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const url = new URL(DATABASE_URL);
  const [shutdown] = lib.initializePollingMessageListener(
    {
      outboxOrInbox: 'outbox',
      dbListenerConfig: { host: url.hostname, port: Number(url.port || 5432), user: url.username || 'postgres', database: url.pathname.slice(1) },
      settings: {
        dbSchema: schema,
        dbTable: 'outbox',
        enableMaxAttemptsProtection: false,
        enablePoisonousMessageProtection: false,
        nextMessagesFunctionSchema: schema,
        nextMessagesFunctionName: 'next_outbox_messages',
        nextMessagesBatchSize: batchSize,
      },
    },
    {
      // Its documented extension point: the message publisher, here one kafkajs send per
      // message with acks=all (the library hands over one message at a time).
      handle: async (message) => {
        await producer.send({
          topic,
          acks: -1,
          messages: [{ key: message.segment ?? message.aggregateId, value: JSON.stringify(message.payload), headers: { [HEADERS.messageId]: message.id } }],
        });
      },
    },
    lib.getDisabledLogger(),
  );
  const started = wall();
  let done = 0;
  let abandoned = 0;
  try {
    for (;;) {
      await sleep(1_000);
      const { rows: r } = await pool.query<{ done: number; abandoned: number }>(
        `SELECT count(*) FILTER (WHERE processed_at IS NOT NULL)::int AS done, count(*) FILTER (WHERE abandoned_at IS NOT NULL)::int AS abandoned FROM "${schema}".outbox`,
      );
      done = r[0]!.done;
      abandoned = r[0]!.abandoned;
      if (done + abandoned >= total || wall() - started > cutOffSeconds * 1000) break;
    }
  } finally {
    await shutdown();
    await producer.disconnect();
    await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
  }
  const seconds = (wall() - started) / 1000;
  return { rowsPerSecond: done / seconds, done, abandoned, seconds, finished: done + abandoned >= total };
}

export async function peer(pool: pg.Pool, o: PeerOptions): Promise<SectionResult<PeerData>> {
  const ours = await relayDrain(pool, o.rows, 'peer workload, ours');
  const batch5 = await peerRun(pool, 5, o.rows, o.seconds);
  const batch50 = await peerRun(pool, 50, o.rows, o.seconds);
  const describe = (r: PeerRun): string =>
    `${fmt(r.rowsPerSecond)} rows/s (${fmt(r.done)} of ${fmt(o.rows)} sent in ${fmt(r.seconds)} s${r.finished ? '' : ', cut off'}, ${fmt(r.abandoned)} abandoned)`;
  const best = Math.max(batch5.rowsPerSecond, batch50.rowsPerSecond);
  return {
    data: { rows: o.rows, ours: ours.rowsPerSecond, batch5, batch50 },
    rows: [
      row('6. peer', `pg-transactional-outbox 0.5.7, polling, batch 5 (default), ${fmt(o.rows)}-row backlog`, describe(batch5)),
      row('6. peer', 'pg-transactional-outbox, batch 50', describe(batch50)),
      row('6. peer', 'outbox-relay, same backlog', `${fmt(ours.rowsPerSecond)} rows/s`),
      row('6. peer', 'ours / the peer (its better setting)', fmt(ours.rowsPerSecond / best, 1), '≥ 20 ×', ours.rowsPerSecond / best >= 20),
    ],
  };
}
