/**
 * A plain SKIP LOCKED queue publishing to Kafka: what a hand-rolled poller does, the
 * comparison arm of the held-horizon section (bench/sections/heldHorizon.ts). Its table is
 * named `outbox` and takes the writers' rows as the relay's does (topic, key, payload,
 * created_at), so the section's writers, probes and sampler work on either unchanged.
 *
 * The worker's cycle is the usual one: UPDATE a batch of pending jobs to running (the
 * claim, FOR UPDATE SKIP LOCKED, committed), send them to Kafka in one request with
 * acks=all, then DELETE them. Every job leaves two dead tuples (the running version and
 * the deleted one) and two dead entries in its pending-jobs index walk, which a held
 * horizon keeps.
 */
import type pg from 'pg';

/** The queue's table, in `schema` (quoted by the caller's rules: bench schemas are plain names). */
export function plainQueueTableSql(schema: string): string {
  return `
CREATE SCHEMA IF NOT EXISTS "${schema}";
CREATE TABLE "${schema}".outbox (
  id         bigserial PRIMARY KEY,
  topic      text NOT NULL,
  key        text,
  payload    jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  status     text NOT NULL DEFAULT 'pending',
  locked_at  timestamptz,
  sent_at    timestamptz
);
CREATE INDEX outbox_pending ON "${schema}".outbox (id) WHERE status = 'pending';`;
}

/** Claim up to $1 pending jobs, oldest first, and commit them as running. */
export function plainQueueClaimSql(schema: string): string {
  return `
UPDATE "${schema}".outbox SET status = 'running', locked_at = now()
 WHERE id IN (SELECT id FROM "${schema}".outbox
               WHERE status = 'pending'
               ORDER BY id
               LIMIT $1
                 FOR UPDATE SKIP LOCKED)
RETURNING id, topic, key, payload::text AS payload`;
}

export function plainQueueDeleteSql(schema: string): string {
  return `DELETE FROM "${schema}".outbox WHERE id = ANY($1::bigint[])`;
}

export interface QueueJob {
  id: string;
  topic: string;
  key: string | null;
  payload: string | null;
}

export interface PlainQueueWorker {
  stop(): Promise<void>;
}

/**
 * Runs the worker loop until stop(): claim, `send` (resolves once Kafka acknowledged the
 * batch), delete; when a claim comes back short, it waits `pollIntervalMs` before the
 * next (the relay's default poll interval, for a like-for-like pick-up).
 */
export function startPlainQueueWorker(
  pool: pg.Pool,
  schema: string,
  send: (jobs: QueueJob[]) => Promise<void>,
  options: { batchSize: number; pollIntervalMs: number; onError(error: unknown): void },
): PlainQueueWorker {
  let stopping = false;
  let wake: (() => void) | undefined;
  const claim = plainQueueClaimSql(schema);
  const remove = plainQueueDeleteSql(schema);
  const loop = (async () => {
    while (!stopping) {
      let full = false;
      try {
        const { rows } = await pool.query<QueueJob>(claim, [options.batchSize]);
        if (rows.length > 0) {
          await send(rows);
          await pool.query(remove, [rows.map((r) => r.id)]);
        }
        full = rows.length === options.batchSize;
      } catch (error) {
        // A failed send leaves its jobs running: a hand-rolled queue needs a reaper for
        // them; the bench fails the arm instead (its rows are never acknowledged).
        options.onError(error);
      }
      if (!full && !stopping) {
        // The poll interval: how long an idle worker waits before it looks again.
        await new Promise<void>((resolve) => {
          wake = resolve;
          setTimeout(resolve, options.pollIntervalMs);
        });
      }
    }
  })();
  return {
    stop: async () => {
      stopping = true;
      wake?.();
      await loop;
    },
  };
}
