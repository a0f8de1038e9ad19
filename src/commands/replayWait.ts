import { setTimeout as sleep } from 'node:timers/promises';
import type { DatabaseOptions } from '../shared/database.js';
import { ConfigError } from '../shared/errors.js';
import { quoteSchema } from '../shared/identifiers.js';
import { optionValue } from '../shared/settings.js';
import { parseDuration } from '../shared/durations.js';
import { openDeadLetters } from './deadLetterSelection.js';
import { replayWaitTimeout } from './options.js';
import { replayedRowsSql } from './sql/replayWait.js';

// `outbox-relay dead-letters replay --wait`: a replay only queues dead letters back into
// the outbox; whether the relay then publishes them, or they fail again and come back as
// dead letters, is known only later. This waits for that (docs/operations-dead-letters.md).

/** How often the rows are looked up while waiting: a primary-key probe per row. */
const POLL_MS = 250;

/** Options of {@link waitForReplayed}: the database, the replayed ids and how long to wait. */
export interface WaitForReplayedOptions extends DatabaseOptions {
  /** The ids a replay moved back (`ReplayResult.replayedIds`). */
  ids: readonly number[];
  /** How long to wait at most, as a duration (`30s`, `5m`; default `5m`). */
  timeout?: string;
  /** Stops waiting; what is known so far is returned, with the rest pending. */
  signal?: AbortSignal;
}

/** Where the replayed rows ended up. Each id is in exactly one list. */
export interface ReplayOutcome {
  /**
   * Published: marked sent in the outbox, or gone from it without coming back as a dead
   * letter (what publishing does under `--on-publish delete`).
   */
  published: number[];
  /** Dead letters again: the cause was not fixed. With the new error name and reason. */
  failedAgain: Array<{ id: number; errorName: string; reason: string }>;
  /** Still unsent in the outbox when the wait ended (timeout or signal). */
  pending: number[];
  /** True when the timeout (or the signal) ended the wait with rows still pending. */
  timedOut: boolean;
}

/**
 * Wait until every replayed row is published or has failed again (is a dead letter again),
 * or the timeout passes. Read-only: it looks the rows up by id, every 250 ms.
 *
 * @throws ConfigError for a bad timeout or ids, before connecting
 */
export async function waitForReplayed(options: WaitForReplayedOptions): Promise<ReplayOutcome> {
  const timeout = optionValue(replayWaitTimeout, options.timeout);
  const parsed = parseDuration(timeout);
  if (!('value' in parsed)) throw new ConfigError('timeout', parsed.problem);
  if (!Array.isArray(options.ids) || options.ids.some((id) => !Number.isSafeInteger(id) || id < 1)) {
    throw new ConfigError('ids', 'must be a list of dead letter ids (positive whole numbers)');
  }
  const s = quoteSchema(options.schema);
  const outcome: ReplayOutcome = { published: [], failedAgain: [], pending: [...options.ids], timedOut: false };
  if (outcome.pending.length === 0) return outcome;
  const deadline = Date.now() + parsed.value;
  const { db, close } = await openDeadLetters(options, 'dead-letters-replay-wait');
  try {
    for (;;) {
      const { rows } = await db.query<{ id: string; in_outbox: boolean; sent: boolean; error_name: string | null; reason: string | null }>(replayedRowsSql(s), [outcome.pending]);
      const still: number[] = [];
      for (const r of rows) {
        const id = Number(r.id);
        if (r.error_name !== null) outcome.failedAgain.push({ id, errorName: r.error_name, reason: r.reason ?? '' });
        else if (r.in_outbox && !r.sent) still.push(id);
        else outcome.published.push(id);
      }
      outcome.pending = still;
      if (still.length === 0) break;
      const left = deadline - Date.now();
      if (left <= 0 || options.signal?.aborted) {
        outcome.timedOut = true;
        break;
      }
      try {
        await sleep(Math.min(POLL_MS, left), undefined, { signal: options.signal });
      } catch {
        outcome.timedOut = true;
        break;
      }
    }
    outcome.published.sort((a, b) => a - b);
    outcome.failedAgain.sort((a, b) => a.id - b.id);
    return outcome;
  } finally {
    await close();
  }
}
