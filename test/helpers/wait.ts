/**
 * Poll `check` until it returns a truthy value; fail with `what` after timeoutMs.
 * For conditions no event announces (rows in a table, messages on a topic).
 */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false | null> | T | undefined | false | null,
  { timeoutMs = 60_000, intervalMs = 50 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A promise and its resolver, for loaders (and the like) the test releases when it chooses. */
export function gate<T = void>(): { promise: Promise<T>; open(value: T): void } {
  let open!: (value: T) => void;
  const promise = new Promise<T>((resolve) => (open = resolve));
  return { promise, open };
}
