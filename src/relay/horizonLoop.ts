import type pg from 'pg';
import { describeError } from '../shared/errors.js';
import { openProbeConnection } from './horizon.js';
import { preparedStatementsLost } from './poolerProbe.js';
import { oldestLockHolder } from './lockHolder.js';
import { quoteIdentifier } from '../shared/identifiers.js';
import { LogEvery } from '../shared/logEvery.js';
import type { RelayRuntime } from './relayRuntime.js';

/** A held horizon is logged once a minute, however many releases it forces meanwhile. */
const HELD_WARNING_INTERVAL_MS = 60_000;

/** How often the horizon probe tries the database again while it does not answer. */
const RECONNECT_PROBE_MS = 250;
/**
 * Idle backoff of the horizon probe: after this many probes in a row that found nothing
 * new (no new id, nothing waiting), the interval doubles, up to IDLE_PROBE_MAX_MS (or
 * the poll interval when that is longer), and drops back to the poll interval as soon as
 * a probe finds a new id. At the default 10 ms that is 200 ms of silence before it backs
 * off: traffic of a few rows a second keeps the fast interval (pick-up at 50 rows/s is
 * unchanged); a relay idle for longer probes 10 times a second instead of 100, and the
 * first row after the silence waits up to 100 ms instead of 10. Measured idle (relay
 * process + its backends, % of a core, load average 7): 2.2 at a 50 ms ceiling, 1.6 at
 * 100, 1.0 at 200; each probe costs the relay process far more than its backend.
 */
const IDLE_PROBES_BEFORE_BACKOFF = 20;
const IDLE_PROBE_MAX_MS = 100;
/**
 * After a longer silence the interval grows once more, up to the idlePollMaxMs setting
 * (default 1 s). Every probe wakes the relay process and its backend, and the wake-up
 * costs far more than the statement (docs/benchmarks.md, History 2026-12-02 12:40): at
 * 10 probes a second an idle relay with its backends took 2.5 % of a core in the bench's
 * idle section (issue 34 wants at most 1 %). Traffic with gaps shorter than
 * LONG_SILENCE_MS (the bench's pick-up after silence: 0.2-1.5 s) keeps the 100 ms
 * ceiling; only the first row after a longer silence waits up to idlePollMaxMs.
 */
const LONG_SILENCE_MS = 2_000;

/** The wait before the next probe after `quietProbes` probes in a row found nothing, `silenceMs` since one did. */
export function idleProbeDelayMs(pollMs: number, idlePollMaxMs: number, quietProbes: number, silenceMs: number): number {
  if (quietProbes < IDLE_PROBES_BEFORE_BACKOFF) return pollMs;
  const ceiling = silenceMs >= LONG_SILENCE_MS ? idlePollMaxMs : Math.min(IDLE_PROBE_MAX_MS, idlePollMaxMs);
  return Math.max(pollMs, Math.min(ceiling, pollMs * 2 ** Math.min(10, quietProbes - IDLE_PROBES_BEFORE_BACKOFF + 1)));
}

/**
 * The horizon loop: probes the visibility horizon (horizon.ts) every poll interval, with
 * an idle backoff, and wakes the workers when it moves; also runs the id audit
 * (idAudit.ts). While the database does not answer it tries again every
 * RECONNECT_PROBE_MS, and its return wakes whatever waits out a backoff.
 */
export async function runHorizonLoop(rt: RelayRuntime): Promise<void> {
  let failures = 0;
  let client: pg.Client | undefined;
  let prepared = true;
  let idleProbes = 0;
  /** When the last probe that found something ran: the silence since then picks the ceiling. */
  let lastNewsMs = Date.now();
  const warnings = new LogEvery(HELD_WARNING_INTERVAL_MS);
  while (!rt.stopping) {
    const poll = rt.options.pollIntervalMs;
    let delay = idleProbeDelayMs(poll, rt.options.idlePollMaxMs, idleProbes, Date.now() - lastNewsMs);
    try {
      // Whether statements are prepared is read once per connection: a switch to inline
      // statements (relay.ts) takes effect with the next connection, after an error.
      if (!client) {
        prepared = !rt.inlineStatements;
        client = await openProbeConnection(rt.options.databaseUrl, `${rt.applicationName}:horizon`, prepared);
      }
      const forcedBefore = rt.horizon.forcedAdvances;
      const resetsBefore = rt.horizon.resets;
      const pairedBefore = rt.horizon.pairedUpTo;
      const returnedBefore = rt.horizon.rowsReturned;
      let moved = await rt.horizon.probe(client, prepared);
      // New ids were just paired: a second probe right away usually finds their
      // transactions done and releases them now rather than one interval later.
      if (rt.horizon.hasPending) moved = (await rt.horizon.probe(client, prepared)) || moved;
      if (failures > 0) {
        // The database answers again: workers and lease renewal waiting out a backoff
        // from the outage try now instead.
        rt.logger.info({ failedProbes: failures }, 'database answers again: resuming');
        rt.databaseBack.notify();
        rt.workAvailable.notify();
      }
      const above = await rt.idAudit.check(client, prepared);
      if (above) {
        rt.logger.warn(
          { ...above, schema: rt.options.schema },
          'unsent rows have ids above the outbox sequence (id set by hand?): they are not claimed until the sequence passes them, and then go out after rows enqueued later; let the sequence pick ids',
        );
      }
      if (rt.horizon.resets > resetsBefore) {
        const seen = rt.horizon.lastReset;
        rt.logger.warn({ ...seen, incarnation: rt.horizon.incarnation }, `horizon starts over: ${seen?.reason ?? 'unknown'}`);
        for (const w of rt.workers) w.drainedTo = 0;
      }
      if (moved) {
        const forced = rt.horizon.forcedAdvances > forcedBefore;
        const heldBack = forced ? warnings.take('forced') : undefined;
        if (heldBack !== undefined) {
          rt.logger.warn(
            {
              watermark: rt.horizon.watermark,
              horizonMaxWaitMs: rt.options.horizonMaxWaitMs,
              forcedReleasesSinceLastLine: heldBack,
              blocker: await findBlocker(client, rt.options.schema),
            },
            'horizon released rows still waiting behind a long-running transaction that wrote the outbox (one line a minute; blocker: the oldest such transaction)',
          );
        }
        rt.emit('horizon', { watermark: rt.horizon.watermark, forced });
        rt.workAvailable.notify();
      }
      // Rows came back below the watermark (a replay, a key unparked): claim them now.
      const returned = rt.horizon.rowsReturned > returnedBefore;
      if (returned) rt.workAvailable.notify();
      // Something may change soon only when a new id appeared, a pair still waits or rows
      // are coming back (a replay moves them one at a time, at its rate).
      const quiet = !moved && !returned && !rt.horizon.hasPending && rt.horizon.pairedUpTo === pairedBefore;
      idleProbes = quiet ? idleProbes + 1 : 0;
      if (!quiet) {
        delay = poll;
        lastNewsMs = Date.now();
      }
      failures = 0;
    } catch (error) {
      if (preparedStatementsLost(error)) rt.preparedStatementsLost(error);
      await client?.end().catch(() => undefined);
      client = undefined;
      // Not the retry backoff: a probe is one cheap connection attempt, and the relay
      // publishes nothing until one succeeds, so a database that comes back is seen
      // within this interval rather than after a backoff grown during the outage.
      delay = RECONNECT_PROBE_MS;
      failures++;
      // Warn when the database goes away; the attempts after that are debug noise.
      rt.logger[failures === 1 ? 'warn' : 'debug']({ err: describeError(error), attempt: failures, retryInMs: delay }, 'horizon probe failed; retrying');
    }
    await rt.sleep(delay);
  }
  await client?.end().catch(() => undefined);
}

/**
 * The transaction a held horizon waits for, for the warning: read only when a line goes
 * out (once a minute). A failure to read it does not fail the probe.
 */
async function findBlocker(client: pg.Client, schema: string): Promise<Record<string, unknown>> {
  try {
    const holder = await oldestLockHolder(client, quoteIdentifier(schema, 'schema'), true);
    return holder ? { ...holder } : { found: false, hint: 'none open now; a prepared transaction is in pg_prepared_xacts' };
  } catch (error) {
    return { found: false, err: describeError(error) };
  }
}
