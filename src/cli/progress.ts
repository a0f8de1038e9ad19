import type { DestinationStream } from 'pino';

// The progress line of the CLI's long runs (a throttled replay, cleanup, purge-processed):
// `queued 1,234 / 10,000 (12.3 %) 10.0/s ETA 14m 37s`, redrawn in place on a terminal.
// Off a terminal it writes nothing at all: the JSON logs and the closing summary are the
// whole output, as before, for whatever reads them.

/** Where the line goes: stderr, so stdout stays the command's output and its logs. */
interface LineStream {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressLineOptions {
  stream?: LineStream;
  env?: NodeJS.ProcessEnv;
  /** Milliseconds, monotonic; tests pass a fake clock. */
  now?: () => number;
  /** Where the logs written through {@link ProgressLine.logDestination} go (default stdout). */
  logStream?: { write(text: string): unknown };
  /** Redraws at most this often (default 200 ms: five a second). */
  redrawMs?: number;
  /** The rate is measured over this last stretch of the run (default 10 s). */
  windowMs?: number;
}

/** What the line says at one moment. */
export interface ProgressState {
  /** The past participle the line starts with: `queued`, `deleted`. */
  verb: string;
  done: number;
  /** Null when unknown; shown with `~` when an estimate. */
  total: number | null;
  totalIsEstimate: boolean;
  /** Per second over the recent window; null until measured. */
  ratePerSecond: number | null;
}

const grouped = (n: number): string => Math.round(n).toLocaleString('en-US');

/** `37s`, `14m 37s`, `2h 05m`, `3d 04h`. */
export function formatEta(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s < 3_600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h ${pad(Math.floor((s % 3_600) / 60))}m`;
  return `${Math.floor(s / 86_400)}d ${pad(Math.floor((s % 86_400) / 3_600))}h`;
}

function formatRate(perSecond: number): string {
  return perSecond < 100 ? `${perSecond.toFixed(1)}/s` : `${grouped(perSecond)}/s`;
}

/**
 * The line's text. An estimate the run has already passed is dropped (a percentage above
 * 100 or a negative ETA would say nothing true), and so is the ETA while the rate is unknown
 * or zero.
 */
export function formatProgress(p: ProgressState): string {
  const total = p.total !== null && p.done <= p.total ? p.total : null;
  let line = `${p.verb} ${grouped(p.done)}`;
  if (total !== null) {
    const percent = total === 0 ? 100 : (p.done * 100) / total;
    line += ` / ${p.totalIsEstimate ? '~' : ''}${grouped(total)} (${percent.toFixed(1)} %)`;
  }
  if (p.ratePerSecond !== null) {
    line += ` ${formatRate(p.ratePerSecond)}`;
    if (total !== null && p.ratePerSecond > 0) line += ` ETA ${formatEta((total - p.done) / p.ratePerSecond)}`;
  }
  return line;
}

/**
 * Rate over a sliding window: samples at most every {@link SAMPLE_MS}, the oldest kept being
 * the last one at or before the window's start, so the rate always spans the full window
 * once the run is that long, and follows a change of pace within about one window.
 */
export class RateWindow {
  private readonly samples: Array<{ atMs: number; done: number }> = [];

  constructor(private readonly windowMs = 10_000) {}

  add(atMs: number, done: number): void {
    const last = this.samples.at(-1);
    if (last && atMs - last.atMs < SAMPLE_MS) return;
    this.samples.push({ atMs, done });
    while (this.samples.length > 2 && this.samples[1]!.atMs <= atMs - this.windowMs) this.samples.shift();
  }

  /** Per second from the window's oldest sample to (`atMs`, `done`); null over less than {@link MIN_SPAN_MS}. */
  rate(atMs: number, done: number): number | null {
    const first = this.samples[0];
    if (!first || atMs - first.atMs < MIN_SPAN_MS) return null;
    return ((done - first.done) * 1000) / (atMs - first.atMs);
  }
}

const SAMPLE_MS = 250;
/** A rate over a shorter span is mostly noise (one batch, one timer). */
const MIN_SPAN_MS = 1_000;

/**
 * Whether to draw: stderr is a terminal, and not one that says it cannot move the cursor
 * back (TERM=dumb: an editor's shell buffer, say). NO_COLOR needs nothing: the line has no
 * colour, nor any escape sequence; it is redrawn with a carriage return and spaces.
 */
export function progressWanted(stream: LineStream, env: NodeJS.ProcessEnv): boolean {
  return stream.isTTY === true && env.TERM !== 'dumb';
}

/**
 * One progress line on a terminal: {@link update} as often as there is news, it redraws at
 * most every `redrawMs`; {@link end} clears it. Disabled (`enabled` false), every method
 * does nothing.
 */
export class ProgressLine {
  readonly enabled: boolean;
  private total: number | null = null;
  private totalIsEstimate = false;
  private readonly stream: LineStream;
  private readonly now: () => number;
  private readonly logStream: { write(text: string): unknown };
  private readonly redrawMs: number;
  private readonly rates: RateWindow;
  private drawn = '';
  private lastDrawMs = -Infinity;
  private done = 0;

  constructor(
    private readonly verb: string,
    options: ProgressLineOptions = {},
  ) {
    this.stream = options.stream ?? process.stderr;
    this.enabled = progressWanted(this.stream, options.env ?? process.env);
    this.now = options.now ?? (() => performance.now());
    this.logStream = options.logStream ?? process.stdout;
    this.redrawMs = options.redrawMs ?? 200;
    this.rates = new RateWindow(options.windowMs);
  }

  /** The total to show (null: none), `estimated` to mark it `~`. */
  withTotal(total: number | null, estimated = false): this {
    this.total = total;
    this.totalIsEstimate = estimated;
    return this;
  }

  /** `done` so far; drawn unless the last draw is more recent than `redrawMs`. */
  update(done: number): void {
    if (!this.enabled) return;
    const atMs = this.now();
    this.done = done;
    this.rates.add(atMs, done);
    if (atMs - this.lastDrawMs < this.redrawMs) return;
    this.lastDrawMs = atMs;
    this.draw(this.text(atMs));
  }

  /** What the line says now. */
  text(atMs = this.now()): string {
    return formatProgress({ verb: this.verb, done: this.done, total: this.total, totalIsEstimate: this.totalIsEstimate, ratePerSecond: this.rates.rate(atMs, this.done) });
  }

  /** Clear the line (the summary that follows gets a clean one). */
  end(): void {
    this.draw('');
  }

  /**
   * A destination for the run's JSON logs while the line is shown: each log line is written
   * whole on a cleared line, and the progress line drawn again below it. Undefined when
   * disabled: the logger then writes as it always does.
   */
  logDestination(): DestinationStream | undefined {
    if (!this.enabled) return undefined;
    return {
      write: (text: string) => {
        const line = this.drawn;
        this.draw('');
        this.logStream.write(text);
        this.draw(line);
      },
    };
  }

  private draw(text: string): void {
    if (!this.enabled || text === this.drawn) return;
    // A line wider than the terminal wraps, and a carriage return then goes back only to
    // the start of its last row.
    const width = Math.max(20, (this.stream.columns || 80) - 1);
    const line = text.length > width ? text.slice(0, width) : text;
    this.stream.write(`\r${line.padEnd(this.drawn.length)}${text === '' ? '\r' : ''}`);
    this.drawn = line;
  }
}
