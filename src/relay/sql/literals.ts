// Values written into SQL text rather than sent as parameters: the batch's simple-query
// messages (src/relay/batch.ts) carry the arguments of prepared statements inline, so that
// BEGIN and the claim, or the mark and COMMIT, go to Postgres in one round trip. Only
// integers and quoted strings, each checked here; anything else throws before it is sent.

/** A safe integer, as SQL. */
export function intLiteral(n: number): string {
  if (!Number.isSafeInteger(n)) throw new TypeError(`not a safe integer: ${String(n)}`);
  return String(n);
}

/** A bigint given as a number or as decimal text (a generation read back from Postgres). */
export function bigintLiteral(v: number | string): string {
  if (typeof v === 'number') return intLiteral(v);
  if (!/^-?\d{1,19}$/.test(v)) throw new TypeError(`not a bigint: ${JSON.stringify(v)}`);
  return v;
}

/** An array of safe integers, as a typed SQL array literal. */
export function intArrayLiteral(values: readonly number[], type: 'smallint' | 'bigint'): string {
  return `'{${values.map(intLiteral).join(',')}}'::${type}[]`;
}

/**
 * A string, as an escape-string literal: quotes doubled and backslashes doubled, so it
 * reads the same whatever standard_conforming_strings says. A NUL cannot be in a text value.
 */
export function textLiteral(s: string): string {
  if (s.includes('\u0000')) throw new TypeError('a NUL cannot be in a text literal');
  return `E'${s.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
}
