/**
 * Probe rows for commit → ack under a steady load: one row at a time, every `everyMs`,
 * into the outbox of `schema`, each stamped with clock_timestamp() (its commit follows at
 * once). The writers' own rows may be deleted or dropped before they could be read back;
 * the probes keep their commit times here. Used by the retention and held-horizon arms.
 */
import type pg from 'pg';
import { PAYLOAD } from './common.js';
import { sleep } from './util.js';

export interface Probes {
  /** Outbox id → commit time (wall ms). */
  readonly committed: Map<number, number>;
  /** Stop probing; resolves once the last probe is in (rejects with a probe's error). */
  stop(): Promise<void>;
}

export function startProbes(pool: pg.Pool, schema: string, topic: string, everyMs: number): Probes {
  const committed = new Map<number, number>();
  let probing = true;
  const loop = (async () => {
    while (probing) {
      const { rows } = await pool.query<{ id: string; t: number }>(
        `INSERT INTO "${schema}".outbox (topic, key, payload, created_at) VALUES ($1, 'probe', $2, clock_timestamp()) RETURNING id, extract(epoch FROM created_at) * 1000 AS t`,
        [topic, PAYLOAD],
      );
      committed.set(Number(rows[0]!.id), Number(rows[0]!.t));
      await sleep(everyMs); // pacing of the probes
    }
  })();
  loop.catch(() => undefined); // its error surfaces in stop()
  return {
    committed,
    stop: async () => {
      probing = false;
      await loop;
    },
  };
}
