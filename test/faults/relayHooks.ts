// Preloaded into the relay processes of the exactly-once fault profiles
// (node --import tsx --import ./test/faults/relayHooks.ts src/cli.ts run; harness.ts).
//
// SIGUSR2 arms the worst-moment crash: the process SIGKILLs itself at the next Kafka
// commit it announces (src/relay/transactionalUnit.ts, KAFKA_COMMITTED_CHANNEL: published
// synchronously after the commit, before the batch's Postgres COMMIT), so the batch is in
// Kafka and its rows still unsent. FAULTS_PROGRESS=off plants the bug the profile must
// catch: the ids a unit reads from its progress when it starts are emptied, as if the
// relay did not look, so such a batch is published a second time.
//
// SIGWINCH arms the stall (FAULTS_STALL_MS): the next Kafka transaction that has sent its
// records waits that long before it adds the unit's progress, so it stays open past its
// transaction timeout while the rest of the process (its lease heartbeats included) goes
// on; no other relay takes the unit over, and only the transaction coordinator's timeout
// can end it. The hook reports, as JSON lines on stdout that the harness counts
// (processes.ts, `event`): `stall-begun`, then `stall-refused` when Kafka refused to go on
// with the transaction (it had aborted it) or `stall-accepted` when it did not, then
// `stall-recovered` at the process' next Kafka commit. No hook in src/ marks the moment a
// transaction is open, so this one wraps, on kafkajs, its producer's transactions (the same
// module instance the relay loads) and, on @platformatic/kafka, the relay's own progress
// commit (src/relay/progressCommit.ts) and its unit's send (src/relay/platformaticUnit.ts).
import diagnosticsChannel from 'node:diagnostics_channel';
import kafkajs from 'kafkajs';
import { KAFKA_COMMITTED_CHANNEL, PROGRESS_READ_CHANNEL } from '../../src/relay/exactlyOnceUnit.js';
import { PlatformaticUnit } from '../../src/relay/platformaticUnit.js';
import { ProgressCommitter } from '../../src/relay/progressCommit.js';

const report = (event: string, fields: Record<string, unknown> = {}): void => {
  process.stdout.write(`${JSON.stringify({ event, pid: process.pid, time: Date.now(), ...fields })}\n`);
};

let killAtNextCommit = false;
process.on('SIGUSR2', () => {
  killAtNextCommit = true;
});
let stallArmed = false;
let recovering = false;
const stallMs = Number(process.env.FAULTS_STALL_MS ?? 0);
process.on('SIGWINCH', () => {
  stallArmed = stallMs > 0;
});
// Every commit's progress and every start's read, as events in the relay's log: a wire
// duplicate is traced to the transaction that first carried its row and to the start that
// should have named it (docs/faults.md, finding 6). Reported before the plant below empties
// what was read.
diagnosticsChannel.subscribe(KAFKA_COMMITTED_CHANNEL, (message) => {
  const { unit, ids } = message as { unit: number; ids?: number[] };
  report('kafka-committed', { unit, ids });
});
diagnosticsChannel.subscribe(PROGRESS_READ_CHANNEL, (message) => {
  const { unit, ids } = message as { unit: number; ids: number[] };
  report('progress-read', { unit, ids: [...ids] });
});
diagnosticsChannel.subscribe(KAFKA_COMMITTED_CHANNEL, () => {
  if (killAtNextCommit) process.kill(process.pid, 'SIGKILL');
  if (recovering) {
    recovering = false;
    report('stall-recovered');
  }
});
// The harness arms a restarted process only after this: its signal handlers are in.
report('hooks-ready');
if (process.env.FAULTS_PROGRESS === 'off') {
  diagnosticsChannel.subscribe(PROGRESS_READ_CHANNEL, (message) => {
    (message as { ids: number[] }).ids = [];
  });
}

type Transaction = Awaited<ReturnType<kafkajs.Producer['transaction']>>;
const producerOf = kafkajs.Kafka.prototype.producer;
kafkajs.Kafka.prototype.producer = function producer(this: kafkajs.Kafka, ...args: Parameters<kafkajs.Kafka['producer']>) {
  const made = producerOf.apply(this, args);
  const transactionOf = made.transaction.bind(made);
  made.transaction = async (): Promise<Transaction> => {
    const transaction = await transactionOf();
    const sendOffsets = transaction.sendOffsets.bind(transaction);
    const commit = transaction.commit.bind(transaction);
    let begun: number | undefined;
    // Kafka may refuse the progress or the commit: either shows it aborted the transaction.
    const afterStall = async <T>(step: () => Promise<T>): Promise<T> => {
      if (begun === undefined) return step();
      try {
        return await step();
      } catch (error) {
        const e = error as Error & { type?: string };
        report('stall-refused', { openMs: Date.now() - begun, error: `${e.name}${e.type ? ` ${e.type}` : ''}: ${e.message}` });
        begun = undefined;
        recovering = true;
        throw error;
      }
    };
    transaction.sendOffsets = async (offsets) => {
      if (stallArmed) {
        stallArmed = false;
        begun = Date.now();
        report('stall-begun', { stallMs });
        await new Promise((r) => setTimeout(r, stallMs));
      }
      return afterStall(() => sendOffsets(offsets));
    };
    transaction.commit = async () => {
      const stalled = begun;
      await afterStall(commit);
      if (stalled !== undefined) report('stall-accepted', { openMs: Date.now() - stalled });
    };
    return transaction;
  };
  return made;
};

// @platformatic/kafka: the stall goes before the unit's progress commit; the unit's send
// settles the transaction (its progress commit or its EndTxn refused, or both accepted).
// Units send at once: only the stalled unit's send reports.
let platformaticStall: { unit: number; begun: number } | undefined;
const progressCommitOf = ProgressCommitter.prototype.commit;
ProgressCommitter.prototype.commit = async function commit(this: ProgressCommitter, ...args: Parameters<ProgressCommitter['commit']>) {
  if (stallArmed) {
    stallArmed = false;
    platformaticStall = { unit: args[1], begun: Date.now() };
    report('stall-begun', { stallMs });
    await new Promise((r) => setTimeout(r, stallMs));
  }
  return progressCommitOf.apply(this, args);
};
const unitSendOf = PlatformaticUnit.prototype.send;
PlatformaticUnit.prototype.send = async function send(this: PlatformaticUnit, ...args: Parameters<PlatformaticUnit['send']>) {
  const mine = (): boolean => platformaticStall?.unit === this.unit;
  try {
    const results = await unitSendOf.apply(this, args);
    if (mine()) {
      report('stall-accepted', { openMs: Date.now() - platformaticStall!.begun });
      platformaticStall = undefined;
    }
    return results;
  } catch (error) {
    if (mine()) {
      const e = error as Error & { type?: string };
      report('stall-refused', { openMs: Date.now() - platformaticStall!.begun, error: `${e.name}${e.type ? ` ${e.type}` : ''}: ${e.message}` });
      platformaticStall = undefined;
      recovering = true;
    }
    throw error;
  }
};
