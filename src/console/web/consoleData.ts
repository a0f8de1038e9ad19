import type pg from 'pg';
import type { DeadLetter } from '../../commands/deadLetterSelection.js';
import type { DiscardDeadLettersOptions, DiscardResult, ReplayDeadLettersOptions, ReplayResult } from '../../commands/deadLetters.js';
import type { UnparkKeyOptions, UnparkResult } from '../../commands/parkedKeys.js';
import type { CappedCount, ConsoleDeadLetterFilter, DeadLetterDetail, DeadLetterPage, OutboxOverview, ParkedKeyPage } from '../model.js';

// What the web layer asks of the database, in one object: the console's reads
// (src/console/data/) and the operator commands (src/commands/) it acts through, the same
// functions the CLI calls. The server receives it (defaultConsoleData() in dataLayer.ts).

/** Where the next page of parked keys starts. */
export type ParkedKeyCursor = NonNullable<ParkedKeyPage['next']>;

/** The data layer the console's pages read and act through. */
export interface ConsoleData {
  readOverview(pool: pg.Pool, outbox: { name: string; schema: string }): Promise<OutboxOverview>;
  searchDeadLetters(pool: pg.Pool, schema: string, filter: ConsoleDeadLetterFilter, page: { afterId: number | null; limit: number }): Promise<DeadLetterPage>;
  readDeadLetter(pool: pg.Pool, schema: string, id: number): Promise<DeadLetterDetail | null>;
  matchingIds(pool: pg.Pool, schema: string, filter: ConsoleDeadLetterFilter, cap: number): Promise<{ ids: number[]; capped: boolean }>;
  countDeadLetters(pool: pg.Pool, schema: string, filter: ConsoleDeadLetterFilter, cap: number): Promise<CappedCount>;
  listParkedKeys(pool: pg.Pool, schema: string, page: { after: ParkedKeyCursor | null; limit: number }): Promise<ParkedKeyPage>;
  parkedKeyOf(pool: pg.Pool, schema: string, deadLetterId: number): Promise<{ topic: string; key: string; parkedAt: Date } | null>;
  unparkKey(options: UnparkKeyOptions & { pool: pg.Pool }): Promise<UnparkResult>;
  replayDeadLetters(options: ReplayDeadLettersOptions & ConsoleDeadLetterFilter & { pool: pg.Pool }): Promise<ReplayResult>;
  discardDeadLetters(options: DiscardDeadLettersOptions & ConsoleDeadLetterFilter & { pool: pg.Pool }): Promise<DiscardResult>;
}
