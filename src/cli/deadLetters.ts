import type { Command } from 'commander';
import { ConfigError } from '../shared/errors.js';
import { createLogger, type LogLevel } from '../shared/logger.js';
import { databaseUrl, logLevel, schema } from '../shared/commonSettings.js';
import { listLimit, replayRate, replayWaitTimeout } from '../commands/options.js';
import { discardDeadLetters, listDeadLetters, replayDeadLetters } from '../commands/deadLetters.js';
import { unparkKey } from '../commands/parkedKeys.js';
import { waitForReplayed, type ReplayOutcome } from '../commands/replayWait.js';
import { deadLetterJson, formatDeadLetters } from '../commands/deadLetterFormat.js';
import type { DeadLetterFilter } from '../commands/deadLetterSelection.js';
import { addSettings, fail, resolve } from './settings.js';
import { scopeOf, withOutboxFlags } from './outboxScope.js';
import { ProgressLine } from './progress.js';

// `outbox-relay dead-letters list | replay | discard | unpark`: the operator side of rows that
// could not be published (src/commands/deadLetters.ts, docs/operations-dead-letters.md).

/** Library option name to the flag the user typed, for ConfigErrors of the filter. */
const FILTER_FLAGS: Record<string, string> = { ids: 'id', topic: '--topic', key: '--key', reason: '--reason', errorName: '--error-name', since: '--since', until: '--until', policy: '--policy', all: '--all', yes: '--yes' };

async function namingFlags<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof ConfigError && error.setting === 'filter') {
      throw new ConfigError('dead-letters', 'no dead letters named: give ids, a filter (--topic, --key, --reason, --error-name, --since, --until, --policy) or --all');
    }
    const flag = error instanceof ConfigError ? FILTER_FLAGS[error.setting] : undefined;
    if (error instanceof ConfigError && flag) throw new ConfigError(flag, error.message.slice(error.setting.length + 2));
    throw error;
  }
}

function withFilterFlags(command: Command): Command {
  return withOutboxFlags(command)
    .argument('[ids...]', 'dead letter ids (space- or comma-separated)')
    .option('--topic <topic>', 'only this topic')
    .option('--key <key>', 'only this key')
    .option('--reason <text>', 'only where the reason or the error name contains this (case-insensitive)')
    .option('--error-name <name>', 'only this error name, exactly (MESSAGE_TOO_LARGE, validation:empty_key)')
    .option('--since <time>', 'dead-lettered at or after: ISO 8601 time (UTC unless an offset is given) or a duration ago (30m, 2h, 7d)')
    .option('--until <time>', 'dead-lettered before: ISO 8601 time or a duration ago')
    .option('--policy <policy>', 'park or skip');
}

function filterFrom(ids: string[], flags: Record<string, unknown>): DeadLetterFilter {
  const list = ids.flatMap((a) => a.split(',')).map((a) => a.trim()).filter((a) => a !== '');
  for (const a of list) if (!/^\d+$/.test(a) || Number(a) < 1) throw new ConfigError('id', `${JSON.stringify(a)} is not a dead letter id (a positive whole number)`);
  return {
    ids: list.length ? list.map(Number) : undefined,
    topic: flags.topic as string | undefined,
    key: flags.key as string | undefined,
    reason: flags.reason as string | undefined,
    errorName: flags.errorName as string | undefined,
    since: flags.since as string | undefined,
    until: flags.until as string | undefined,
    policy: flags.policy as 'park' | 'skip' | undefined,
  };
}

const LIST_SETTINGS = [databaseUrl, schema, listLimit] as const;
const REPLAY_SETTINGS = [databaseUrl, schema, replayRate, replayWaitTimeout, logLevel] as const;
const DISCARD_SETTINGS = [databaseUrl, schema] as const;
const UNPARK_SETTINGS = [databaseUrl, schema] as const;

export function addDeadLetterCommands(program: Command): void {
  const deadLetters = program
    .command('dead-letters')
    .description('Rows the relay could never publish: list them, replay them (throttled) once the cause is fixed, or discard them.');

  addSettings(
    withFilterFlags(deadLetters.command('list').description('List dead letters, lowest id first. Read-only.')).option('--json', 'print JSON instead of a table'),
    LIST_SETTINGS,
  ).action(async (ids: string[], flags: Record<string, unknown>) => {
    const o = resolve(LIST_SETTINGS, flags, scopeOf(flags).one());
    const result = await namingFlags(() =>
      listDeadLetters({ ...filterFrom(ids, flags), databaseUrl: o.databaseUrl as string, schema: o.schema as string, limit: o.limit as number }),
    );
    process.stdout.write(
      flags.json
        ? `${JSON.stringify({ total: result.total, deadLetters: result.deadLetters.map(deadLetterJson) }, null, 2)}\n`
        : formatDeadLetters(result.deadLetters, result.total),
    );
  });

  addSettings(
    withFilterFlags(
      deadLetters
        .command('replay')
        .description('Move dead letters back into the outbox under their original id and message id, one row per transaction, lowest id first, at --rate rows per second. Fix the cause first.'),
    )
      .option('--all', 'replay every dead letter (needed when no ids and no filter are given)')
      .option('--wait', 'after queueing, wait (up to --wait-timeout) until each row is published or fails again; exit 1 if any fails again or is still unpublished'),
    REPLAY_SETTINGS,
  ).action(async (ids: string[], flags: Record<string, unknown>) => {
    const o = resolve(REPLAY_SETTINGS, flags, scopeOf(flags).one());
    const progress = new ProgressLine('queued');
    const logger = createLogger(o.logLevel as LogLevel, progress.logDestination());
    // The line's total, counted only when the line is shown (each dead letter counts once
    // handled, moved or not); a count that fails leaves the replay to report the problem.
    const count = async (): Promise<number> => (await listDeadLetters({ ...filterFrom(ids, flags), databaseUrl: o.databaseUrl as string, schema: o.schema as string, limit: 1 })).total;
    if (progress.enabled) progress.withTotal(await count().catch(() => null));
    let handled = 0;
    // A signal stops the replay between two rows: what moved stays moved, the rest stay dead letters.
    const abort = new AbortController();
    const stop = (): void => abort.abort();
    process.once('SIGINT', stop).once('SIGTERM', stop);
    const r = await namingFlags(() =>
      replayDeadLetters({
        ...filterFrom(ids, flags),
        all: flags.all === true ? true : undefined,
        databaseUrl: o.databaseUrl as string,
        schema: o.schema as string,
        rate: o.rate as number,
        signal: abort.signal,
        onProgress: progress.enabled ? () => progress.update(++handled) : undefined,
        logger,
      }),
    ).finally(() => progress.end());
    logger.flush();
    const seconds = (r.finishedAt.getTime() - r.startedAt.getTime()) / 1000;
    // A replay only puts rows back into the outbox: whether the relay can publish them now
    // is known later (--wait), so this line says queued, never published.
    let line = `queued ${r.replayed} of ${r.selected} dead letters back into the outbox in ${seconds.toFixed(1)} s` + (r.ratePerSecond === null ? '' : ` (${r.ratePerSecond.toFixed(1)}/s)`);
    line += `, not yet published; released ${r.releasedKeys.length} parked ${r.releasedKeys.length === 1 ? 'key' : 'keys'}`;
    if (r.waiting.length) line += `; ${r.waiting.length} wait behind keys still parked by dead letters ${[...new Set(r.waiting.map((w) => w.parkedBehind))].join(', ')}`;
    process.stdout.write(`${line}\n`);
    if (r.stopped) fail(new Error(`replay stopped by a signal after ${r.replayed} of ${r.selected}; the others are still dead letters`));
    let outcome: ReplayOutcome | undefined;
    if (flags.wait === true && r.replayedIds.length) {
      outcome = await waitForReplayed({ ids: r.replayedIds, timeout: o.timeout as string, databaseUrl: o.databaseUrl as string, schema: o.schema as string, signal: abort.signal });
      process.stdout.write(`${outcomeLine(outcome, o.timeout as string)}\n`);
    }
    if (r.notMoved.length) {
      const conflicts = r.notMoved.filter((n) => n.why === 'conflict').map((n) => n.id);
      const gone = r.notMoved.filter((n) => n.why === 'gone').map((n) => n.id);
      fail(
        new Error(
          `${r.notMoved.length} not replayed` +
            (conflicts.length ? `; still dead letters, a row with the same id or dedup key is in the outbox: ${conflicts.join(', ')}` : '') +
            (gone.length ? `; replayed or discarded by someone else meanwhile: ${gone.join(', ')}` : ''),
        ),
      );
    }
    if (outcome?.failedAgain.length) {
      fail(new Error(`${outcome.failedAgain.length} of ${r.replayed} failed again and are dead letters again (ids ${ids50(outcome.failedAgain.map((f) => f.id))}): fix the cause first (docs/operations-dead-letters.md)`));
    }
    if (outcome?.pending.length) {
      const why = abort.signal.aborted ? 'when a signal stopped the wait' : `within ${o.timeout as string}`;
      fail(new Error(`${outcome.pending.length} of ${r.replayed} not published ${why} (still in the outbox: ids ${ids50(outcome.pending)})`));
    }
  });

  addSettings(
    withFilterFlags(
      deadLetters
        .command('discard')
        .description('Delete dead letters for good, releasing the keys they park. Without --yes, lists what it would delete and exits 2.'),
    )
      .option('--all', 'discard every dead letter (needed when no ids and no filter are given)')
      .option('--yes', 'confirm: really delete them'),
    DISCARD_SETTINGS,
  ).action(async (ids: string[], flags: Record<string, unknown>) => {
    const o = resolve(DISCARD_SETTINGS, flags, scopeOf(flags).one());
    const r = await namingFlags(() =>
      discardDeadLetters({
        ...filterFrom(ids, flags),
        all: flags.all === true ? true : undefined,
        yes: flags.yes === true,
        databaseUrl: o.databaseUrl as string,
        schema: o.schema as string,
      }),
    );
    if (r.dryRun) {
      process.stdout.write(formatDeadLetters(r.matched));
      fail(new ConfigError('--yes', `is required to discard these ${r.matched.length} dead letters; nothing was discarded`));
    }
    const released = r.releasedKeys.length;
    // The ids deleted, not the ids listed: a row replayed or discarded by someone else
    // between the two is not claimed as discarded here.
    process.stdout.write(
      `discarded ${r.discarded} dead letters` +
        (r.discarded ? ` (ids ${ids50(r.discardedIds)})` : '') +
        (r.gone.length ? `; ${r.gone.length} listed were gone already (replayed or discarded by someone else meanwhile): ${ids50(r.gone)}` : '') +
        `; released ${released} parked ${released === 1 ? 'key' : 'keys'}\n`,
    );
  });

  addSettings(
    withOutboxFlags(
      deadLetters
        .command('unpark')
        .description("Release a parked key without its dead letter: the key's waiting rows are published, in order, without it. The dead letter stays; replaying it later publishes it after the key's later events."),
    )
      .requiredOption('--topic <topic>', "the parked key's topic")
      .requiredOption('--key <key>', 'the parked key'),
    UNPARK_SETTINGS,
  ).action(async (flags: Record<string, unknown>) => {
    const o = resolve(UNPARK_SETTINGS, flags, scopeOf(flags).one());
    const r = await unparkKey({ topic: flags.topic as string, key: flags.key as string, databaseUrl: o.databaseUrl as string, schema: o.schema as string });
    const waiting = `${r.waiting}${r.waitingCapped ? '+' : ''} waiting ${r.waiting === 1 ? 'row is' : 'rows are'}`;
    const skipped = r.skippedDeadLetterIds;
    // A park left behind by hand-written SQL has no dead letter to keep: say so, rather
    // than name a dead letter that no longer exists as staying.
    const kept =
      skipped.length === 0
        ? `Dead letter ${r.deadLetterId} no longer exists: the key had no dead letter to wait for`
        : `${skipped.length === 1 ? 'Dead letter' : 'Dead letters'} ${skipped.join(', ')} ${skipped.length === 1 ? 'stays' : 'stay'} (policy skip): replaying ${skipped.length === 1 ? 'it' : 'them'} later publishes ${skipped.length === 1 ? 'it' : 'them'} after the key's later events`;
    process.stdout.write(
      `unparked key ${JSON.stringify(r.key)} of topic ${JSON.stringify(r.topic)} (parked since ${r.parkedAt.toISOString()} behind dead letter ${r.deadLetterId}); ${waiting} published next, without it. ${kept}\n`,
    );
  });
}

/** At most 50 ids, then an ellipsis. */
function ids50(ids: readonly number[]): string {
  return ids.slice(0, 50).join(', ') + (ids.length > 50 ? ', …' : '');
}

/** What `--wait` saw: published, failed again (with the first new reason), still pending. */
function outcomeLine(o: ReplayOutcome, timeout: string): string {
  let line = `published ${o.published.length}, failed again ${o.failedAgain.length}`;
  const first = o.failedAgain[0];
  if (first) line += ` (${first.id}: ${first.errorName}: ${first.reason.replace(/\s+/g, ' ').slice(0, 120)}${o.failedAgain.length > 1 ? '; …' : ''})`;
  if (o.pending.length) line += `, not yet published ${o.pending.length} (waited ${timeout})`;
  return line;
}
