// The console's reads (what the web layer shows); its actions are the operator commands
// of src/commands/ (replayDeadLetters, discardDeadLetters, unparkKey), the CLI's own.
export { readOverview, BACKLOG_CAP, DEAD_LETTER_CAP, GROUPED_DEAD_LETTERS, PARKED_KEY_CAP } from './overview.js';
export { readFlow } from './flow.js';
export { searchDeadLetters, countDeadLetters, matchingIds, readDeadLetter, MATCHING_CAP } from './deadLetters.js';
export { listParkedKeys, parkedKeyOf, WAITING_SCAN } from './parkedKeys.js';
