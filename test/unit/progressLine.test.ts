import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatEta, formatProgress, ProgressLine, progressWanted, RateWindow } from '../../src/cli/progress.js';

// The CLI's progress line (src/cli/progress.ts): its text, its rate over a sliding window
// and its ETA, on a fake clock and a fake terminal (what is written to it is kept).

function terminal(columns = 120): { isTTY: true; columns: number; written: string[]; write(text: string): boolean; screen(): string } {
  return {
    isTTY: true,
    columns,
    written: [],
    write(text: string) {
      this.written.push(text);
      return true;
    },
    /** What the terminal shows on the line: each \r goes back to its start. */
    screen() {
      // Characters overwrite from where the last \r left the cursor.
      let shown: string[] = [];
      let at = 0;
      for (const ch of this.written.join('')) {
        if (ch === '\r') at = 0;
        else if (ch === '\n') {
          shown = [];
          at = 0;
        } else shown[at++] = ch;
      }
      return shown.join('').trimEnd();
    },
  };
}

test('the text: done / total, percent, rate and ETA; an estimate marked ~; an estimate passed is dropped', () => {
  assert.equal(formatProgress({ verb: 'replayed', done: 1_234, total: 10_000, totalIsEstimate: false, ratePerSecond: 10 }), 'replayed 1,234 / 10,000 (12.3 %) 10.0/s ETA 14m 37s');
  assert.equal(formatProgress({ verb: 'deleted', done: 12_000, total: 50_000, totalIsEstimate: true, ratePerSecond: 3_412.6 }), 'deleted 12,000 / ~50,000 (24.0 %) 3,413/s ETA 11s');
  assert.equal(formatProgress({ verb: 'deleted', done: 60_000, total: 50_000, totalIsEstimate: true, ratePerSecond: 3_000 }), 'deleted 60,000 3,000/s');
  assert.equal(formatProgress({ verb: 'replayed', done: 0, total: 40, totalIsEstimate: false, ratePerSecond: null }), 'replayed 0 / 40 (0.0 %)');
  assert.equal(formatProgress({ verb: 'replayed', done: 5, total: 40, totalIsEstimate: false, ratePerSecond: 0 }), 'replayed 5 / 40 (12.5 %) 0.0/s');
  assert.equal(formatProgress({ verb: 'deleted', done: 0, total: 0, totalIsEstimate: false, ratePerSecond: null }), 'deleted 0 / 0 (100.0 %)');
  assert.equal(formatProgress({ verb: 'deleted', done: 7, total: null, totalIsEstimate: false, ratePerSecond: 2.25 }), 'deleted 7 2.3/s');
});

test('ETA: seconds, minutes, hours, days', () => {
  assert.equal(formatEta(0), '0s');
  assert.equal(formatEta(59.4), '59s');
  assert.equal(formatEta(60), '1m 00s');
  assert.equal(formatEta(876.6), '14m 37s');
  assert.equal(formatEta(2 * 3_600 + 5 * 60 + 59), '2h 05m');
  assert.equal(formatEta(3 * 86_400 + 4 * 3_600), '3d 04h');
});

test('rate over a sliding window: none before a second, the whole run until the window is full, then only the window', () => {
  const w = new RateWindow(10_000);
  w.add(0, 0);
  assert.equal(w.rate(500, 5), null);
  // 10/s for 20 s, sampled at every row.
  for (let t = 100; t <= 20_000; t += 100) w.add(t, t / 100);
  assert.equal(w.rate(20_000, 200), 10);
  // Then 50/s for 10 s: after a window's length the rate is the new pace alone.
  for (let t = 20_020; t <= 30_000; t += 20) w.add(t, 200 + (t - 20_000) / 20);
  const r = w.rate(30_000, 700)!;
  assert.ok(Math.abs(r - 50) < 1.5, `rate ${r}`);
  // Halfway through the change the window mixes both paces.
  const mixed = new RateWindow(10_000);
  for (let t = 0; t <= 10_000; t += 100) mixed.add(t, t / 100);
  for (let t = 10_020; t <= 15_000; t += 20) mixed.add(t, 100 + (t - 10_000) / 20);
  const m = mixed.rate(15_000, 350)!;
  assert.ok(m > 25 && m < 32, `mixed rate ${m}`);
});

test('a line on a terminal: at most one redraw per redrawMs, rate and ETA from the fake clock, cleared at the end', () => {
  let now = 0;
  const tty = terminal();
  const line = new ProgressLine('replayed', { stream: tty, env: { TERM: 'xterm' }, now: () => now, redrawMs: 200 }).withTotal(100);
  assert.equal(line.enabled, true);
  line.update(0);
  assert.equal(tty.screen(), 'replayed 0 / 100 (0.0 %)');
  // 10 rows a second, an update per row: 5 redraws a second at most.
  for (let i = 1; i <= 30; i++) {
    now = i * 100;
    line.update(i);
  }
  assert.equal(tty.written.length, 1 + 15, 'one redraw every other update');
  assert.equal(tty.screen(), 'replayed 30 / 100 (30.0 %) 10.0/s ETA 7s');
  now = 3_100;
  line.update(31);
  assert.equal(tty.written.length, 16, 'too soon to redraw');
  assert.equal(line.text(), 'replayed 31 / 100 (31.0 %) 10.0/s ETA 7s');
  assert.ok(
    tty.written.every((w) => w.startsWith('\r') && !w.includes('\x1b')),
    'redrawn with a carriage return, no escape sequence',
  );
  line.end();
  assert.equal(tty.screen(), '', 'the line is cleared');
  assert.match(tty.written.at(-1)!, /^\r +\r$/);
});

test('a shorter text overwrites a longer one whole; a line wider than the terminal is cut', () => {
  let now = 0;
  const tty = terminal(30);
  const line = new ProgressLine('deleted', { stream: tty, env: {}, now: () => now }).withTotal(1_000_000, true);
  line.update(999_999);
  assert.equal(tty.screen(), 'deleted 999,999 / ~1,000,000', 'cut at 29 characters');
  assert.ok(tty.written.every((w) => w.length <= 1 + 29));
  // The estimate passed: the total goes, and with it most of the text.
  now = 500;
  line.update(1_000_001);
  assert.equal(tty.screen(), 'deleted 1,000,001');
});

test('log lines written while the line is shown go on a clean line, and the line is drawn again below', () => {
  const tty = terminal();
  const logs: string[] = [];
  const logStream = { write: (t: string) => tty.write(t) && logs.push(t) };
  const line = new ProgressLine('replayed', { stream: tty, env: {}, now: () => 0, logStream }).withTotal(10);
  line.update(3);
  line.logDestination()!.write('{"msg":"replay progress"}\n');
  assert.deepEqual(logs, ['{"msg":"replay progress"}\n']);
  const out = tty.written.join('');
  assert.ok(out.includes(`\r${' '.repeat('replayed 3 / 10 (30.0 %)'.length)}\r{"msg":"replay progress"}\n`), JSON.stringify(out));
  assert.equal(tty.screen(), 'replayed 3 / 10 (30.0 %)');
});

test('not a terminal, or TERM=dumb: nothing is written, and the logger keeps its own destination', () => {
  for (const [stream, env] of [
    [{ isTTY: false, write: () => assert.fail('wrote') }, {}],
    [{ write: () => assert.fail('wrote') }, {}],
    [{ isTTY: true, write: () => assert.fail('wrote') }, { TERM: 'dumb' }],
  ] as const) {
    const line = new ProgressLine('deleted', { stream, env, now: () => 0 }).withTotal(5);
    assert.equal(line.enabled, false);
    line.update(1);
    line.end();
    assert.equal(line.logDestination(), undefined);
  }
  assert.equal(progressWanted({ isTTY: true, write: () => true }, { NO_COLOR: '1' }), true, 'NO_COLOR: the line has no colour to take away');
});
