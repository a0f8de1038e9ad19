import type pg from 'pg';
import { HEADERS } from '../../src/shared/kafka.js';
import assert from 'node:assert/strict';
import { readTopic, type ReadMessage } from './kafka.js';

export interface WorkloadOptions {
  pool: pg.Pool;
  schema: string;
  topic: string;
  writers: number;
  transactionsPerWriter: number;
  keys: number;
  /** Every n-th transaction rolls back (its rows must never be delivered). */
  rollbackEvery?: number;
  /** Every n-th transaction stays open a while after inserting, so ids commit out of order. */
  holdEvery?: number;
  holdMs?: number;
  /** Called after each commit, e.g. to inject a fault mid-stream. */
  onCommit?: (committed: number) => Promise<void> | void;
}

/**
 * Concurrent writers that do not lock the entity: several write the same keys, some hold
 * their transaction open after inserting, some roll back. Returns the message ids of
 * committed and of rolled-back rows.
 */
export async function runWriters(o: WorkloadOptions): Promise<{ committed: Set<string>; rolledBack: Set<string> }> {
  const committed = new Set<string>();
  const rolledBack = new Set<string>();
  let commits = 0;
  await Promise.all(
    Array.from({ length: o.writers }, async (_, w) => {
      const client = await o.pool.connect();
      try {
        for (let t = 0; t < o.transactionsPerWriter; t++) {
          const n = 1 + ((t + w) % 3);
          await client.query('BEGIN');
          const { rows } = await client.query<{ message_id: string }>(
            `INSERT INTO "${o.schema}".outbox (topic, key, payload)
             SELECT $1, 'key-' || ((($2::int * 7 + $3::int * 13 + i) % $4::int)), jsonb_build_object('writer', $2::int, 'tx', $3::int, 'i', i)
               FROM generate_series(1, $5::int) AS i
             RETURNING message_id`,
            [o.topic, w, t, o.keys, n],
          );
          if (o.holdEvery && t % o.holdEvery === w % o.holdEvery) await new Promise((r) => setTimeout(r, o.holdMs ?? 20));
          if (o.rollbackEvery && t % o.rollbackEvery === o.rollbackEvery - 1) {
            await client.query('ROLLBACK');
            for (const r of rows) rolledBack.add(r.message_id);
          } else {
            await client.query('COMMIT');
            for (const r of rows) committed.add(r.message_id);
            commits++;
            await o.onCommit?.(commits);
          }
        }
      } finally {
        client.release();
      }
    }),
  );
  return { committed, rolledBack };
}

/** What a reader of the topic saw, judged against the rows that were committed. */
export function judge(messages: ReadMessage[], committed: Set<string>, rolledBack: Set<string>): { lost: string[]; rolledBackDelivered: string[]; reorderings: string[]; duplicates: number } {
  const first = new Set<string>();
  const lastOfKey = new Map<string, number>();
  const reorderings: string[] = [];
  let duplicates = 0;
  for (const m of [...messages].sort((a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset))) {
    const id = m.headers[HEADERS.messageId]!;
    if (first.has(id)) {
      duplicates++;
      continue;
    }
    first.add(id);
    const outboxId = Number(m.headers[HEADERS.outboxId]);
    const last = lastOfKey.get(m.key!) ?? 0;
    if (outboxId < last) reorderings.push(`${m.key}: ${outboxId} after ${last}`);
    lastOfKey.set(m.key!, Math.max(last, outboxId));
  }
  return {
    lost: [...committed].filter((id) => !first.has(id)),
    rolledBackDelivered: [...rolledBack].filter((id) => first.has(id)),
    reorderings,
    duplicates,
  };
}

/** Read `topic` until every committed row arrived; assert none lost, none rolled back delivered, no key reordered. */
export async function assertDeliveredInOrder(topic: string, committed: Set<string>, rolledBack: Set<string>): Promise<void> {
  const messages = await readTopic(topic, (m) => new Set(m.map((x) => x.headers[HEADERS.messageId])).size >= committed.size);
  const verdict = judge(messages, committed, rolledBack);
  assert.deepEqual(verdict.lost, []);
  assert.deepEqual(verdict.rolledBackDelivered, []);
  assert.deepEqual(verdict.reorderings, []);
}
