import { OutboxError, describeError } from '../shared/errors.js';
import { markRecoveredSql } from './sql/recover.js';
import type { RelayRuntime } from './relayRuntime.js';
import type { Worker } from './batch.js';
import type { ExactlyOnceUnit } from './exactlyOnceUnit.js';

/**
 * Exactly-once mode: before a worker claims anything of its unit (after the relay got the
 * unit, and after any failed batch, whose Kafka transaction may have committed), start
 * the unit's producer, which fences every other producer of the unit and settles its open
 * transaction, and mark sent what the unit's progress says Kafka holds. True when the
 * unit is ready; false (logged) when it must be tried again.
 */
export async function startUnit(rt: RelayRuntime, worker: Worker, unit: ExactlyOnceUnit, shards: readonly number[]): Promise<boolean> {
  // Never after a stop began: starting the unit again would fence its next owner.
  if (rt.stopping) return false;
  try {
    const ids = await unit.start();
    if (rt.stopping) return false;
    let marked = 0;
    let unsent = 0;
    if (ids.length > 0) {
      const { rows } = await rt.pool.query<{ unsent: number; marked: number }>(markRecoveredSql(rt.quotedSchema, rt.options.onPublish), [ids, shards, rt.instanceId]);
      marked = rows[0]!.marked;
      unsent = rows[0]!.unsent;
      if (marked < rows[0]!.unsent) {
        throw new OutboxError(`a lease of the unit lapsed while marking its progress: ${marked} of ${rows[0]!.unsent} rows marked sent`, { retriable: true });
      }
    }
    worker.unitReady = true;
    // At info even when nothing was marked: a unit starts only when the relay gets it or after a
    // failed batch, and which progress each start read is what a wire duplicate is traced by.
    rt.logger.info(
      { worker: worker.index, unit: unit.unit, progressIds: ids.length, firstProgressId: ids[0], lastProgressId: ids[ids.length - 1], unsent, markedSent: marked },
      marked > 0
        ? "exactly-once unit started: rows its last Kafka transaction published were still unsent (a crash between Kafka's commit and Postgres'); marked sent, not published again"
        : 'exactly-once unit started',
    );
    return true;
  } catch (error) {
    rt.logger.warn({ worker: worker.index, unit: unit.unit, err: describeError(error) }, 'could not start the exactly-once unit; retrying before any claim');
    return false;
  }
}
