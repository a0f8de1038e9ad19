/** The fault suite's log: one line on stdout, with the seconds since the process started. */
const t0 = Date.now();

export function log(line: string): void {
  process.stdout.write(`faults [${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${line}\n`);
}

/** Milliseconds since the process started. */
export function elapsedMs(): number {
  return Date.now() - t0;
}
