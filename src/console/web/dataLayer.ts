import { discardDeadLetters, replayDeadLetters } from '../../commands/deadLetters.js';
import { unparkKey } from '../../commands/parkedKeys.js';
import { countDeadLetters, listParkedKeys, matchingIds, parkedKeyOf, readDeadLetter, readOverview, searchDeadLetters } from '../data/index.js';
import type { ConsoleData } from './consoleData.js';

// The console's data layer: the reads of src/console/data/ and the operator commands of
// src/commands/ (the CLI's own functions: a replay from the console and one from
// `outbox-relay dead-letters replay` are one code path).

/** The real data layer. */
export function defaultConsoleData(): ConsoleData {
  return { readOverview, searchDeadLetters, readDeadLetter, countDeadLetters, matchingIds, listParkedKeys, parkedKeyOf, unparkKey, replayDeadLetters, discardDeadLetters };
}
