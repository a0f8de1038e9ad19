import { ConfigError } from '../shared/errors.js';

/** The known option closest to a typo: the same ignoring case, or at most two edits away. */
function closestOption(key: string, known: ReadonlySet<string>): string | undefined {
  const lower = key.toLowerCase();
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = name.toLowerCase() === lower ? 0 : editDistance(lower, name.toLowerCase());
    if (distance <= 2 && (!best || distance < best.distance)) best = { name, distance };
  }
  return best?.name;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row.push(Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1)));
    previous = row;
  }
  return previous[b.length] as number;
}

// Any key not among the known options is a typo (`shutdownTimeoutMS`,
// `messagesPerTransation`) that would otherwise leave the default in force without a word.

/**
 * Every key is one of `known`, createConsumer's options.
 * @throws ConfigError naming the first unknown key and the option it is closest to
 */
export function checkOptionNames(keys: string[], known: ReadonlySet<string>): void {
  for (const key of keys) {
    if (known.has(key)) continue;
    const near = closestOption(key, known);
    throw new ConfigError(key, `is not an option of createConsumer${near ? ` (did you mean ${near}?)` : ''}; see docs/consumer.md, Options`);
  }
}
