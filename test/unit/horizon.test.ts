import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Horizon } from '../../src/relay/horizon.js';

function clock(start = 0): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

test('horizon releases ids only once a later snapshot shows every older transaction finished', () => {
  const c = clock();
  const h = new Horizon('"s"', 60_000, c.now);
  // Probe 1: ids up to 10 exist; the probe's own transaction id is 100.
  assert.equal(h.advance(90n, 10, 100n), false);
  assert.equal(h.watermark, 0);
  // Probe 2: xmin 95, so some transaction below 100 still runs: nothing released.
  assert.equal(h.advance(95n, 10, null), false);
  assert.equal(h.watermark, 0);
  // Probe 3: xmin passed 100: ids up to 10 are final.
  assert.equal(h.advance(101n, 10, null), true);
  assert.equal(h.watermark, 10);
  assert.equal(h.hasPending, false);
});

test('horizon keeps pairs in order and releases each as its transactions finish', () => {
  const h = new Horizon('"s"', 60_000, clock().now);
  h.advance(50n, 5, 60n);
  h.advance(55n, 8, 70n);
  h.advance(65n, 12, 80n);
  assert.equal(h.watermark, 5, 'first pair released (60 < 65), the others wait');
  h.advance(90n, 12, null);
  assert.equal(h.watermark, 12);
});

test('horizon releases a pair stuck behind a long transaction after maxWaitMs, and counts it', () => {
  const c = clock();
  const h = new Horizon('"s"', 1_000, c.now);
  h.advance(10n, 7, 20n);
  c.advance(999);
  h.advance(10n, 7, null);
  assert.equal(h.watermark, 0);
  assert.equal(h.oldestWaitMs(), 999);
  c.advance(1);
  assert.equal(h.advance(10n, 7, null), true);
  assert.equal(h.watermark, 7);
  assert.equal(h.forcedAdvances, 1);
});

test('horizon ignores a probe that took no transaction id (no new outbox ids)', () => {
  const h = new Horizon('"s"', 1_000, clock().now);
  h.advance(10n, 0, null);
  assert.equal(h.hasPending, false);
  assert.equal(h.watermark, 0);
});

test('horizon starts over when the sequence goes backwards (ids above it may be handed out again)', () => {
  const h = new Horizon('"s"', 60_000, clock().now);
  h.advance(10n, 50, 20n);
  h.advance(30n, 50, null);
  assert.equal(h.watermark, 50);
  // Crash recovery restored the sequence from an older WAL record.
  h.advance(40n, 30, null);
  assert.equal(h.watermark, 0, 'nothing above zero is known to be final any more');
  assert.equal(h.resets, 1);
  assert.deepEqual(h.lastReset, { reason: 'the outbox sequence went backwards (setval, or a recovery)', sequenceNow: 30, pairedUpTo: 50 }, 'what the log line says it saw');
  h.advance(40n, 35, 45n);
  h.advance(50n, 35, null);
  assert.equal(h.watermark, 35, 'pairs afresh');
});

test('horizon waits for the WAL to be flushed past a pair before releasing it (a crash could hand its ids out again)', () => {
  const h = new Horizon('"s"', 60_000, clock().now);
  h.advance(10n, 41, 20n, 1_000n, 900n);
  assert.equal(h.advance(30n, 41, null, 0n, 999n), false, 'transactions done, WAL not yet on disk');
  assert.equal(h.watermark, 0);
  assert.equal(h.advance(30n, 41, null, 0n, 1_000n), true);
  assert.equal(h.watermark, 41);
});

test('horizon probe: prepared on a direct connection, unnamed through a transaction pooler; both ask for others_xmin while a pair waits', async () => {
  const sent: Array<{ name?: string; values: unknown[] }> = [];
  const row = { xmin: '100', others_xmin: null, flushed: '0/10', last_id: 7, xid: '120', lsn: '0/8', started: 's' };
  const client = { query: async (q: { name?: string; values: unknown[] }) => (sent.push(q), { rows: [row] }) } as never;
  for (const prepared of [true, false]) {
    const h = new Horizon('"s"', 60_000, clock().now);
    await h.probe(client, prepared); // pairs ids up to 7 with xid 120: a pair now waits
    await h.probe(client, prepared);
    const [first, second] = sent.splice(0);
    assert.equal(first!.values[1], null, 'no pair waits yet');
    assert.equal(second!.values[1], '120', 'the pair waited for');
    assert.equal(second!.name === undefined, !prepared, prepared ? 'a named (prepared) statement' : 'an unnamed statement: nothing kept on a pooled server connection');
  }
});

test('horizon probe: a move of the claim floors\' generation (a dead letter replayed, a key unparked) counts as rows returned below the watermark; the first reading and an unchanged one do not', async () => {
  let generation = '5';
  const client = { query: async () => ({ rows: [{ xmin: '100', others_xmin: null, flushed: '0/10', last_id: 0, xid: null, lsn: null, started: 's', floor_generation: generation }] }) } as never;
  const h = new Horizon('"s"', 60_000, clock().now);
  await h.probe(client);
  assert.equal(h.rowsReturned, 0, 'the first reading is where the relay starts, not a change');
  await h.probe(client);
  assert.equal(h.rowsReturned, 0, 'unchanged');
  generation = '6';
  assert.equal(await h.probe(client), false, 'the watermark did not move');
  assert.equal(h.rowsReturned, 1, 'yet rows came back');
  await h.probe(client);
  assert.equal(h.rowsReturned, 1);
});
