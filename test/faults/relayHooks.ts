// Preloaded into the relay processes of the exactly-once fault profiles
// (node --import tsx --import ./test/faults/relayHooks.ts src/cli.ts run; harness.ts).
//
// SIGUSR2 arms the worst-moment crash: the process SIGKILLs itself at the next Kafka
// commit it announces (src/relay/transactionalUnit.ts, KAFKA_COMMITTED_CHANNEL: published
// synchronously after the commit, before the batch's Postgres COMMIT), so the batch is in
// Kafka and its rows still unsent. FAULTS_PROGRESS=off plants the bug the profile must
// catch: the ids a unit reads from its progress when it starts are emptied, as if the
// relay did not look, so such a batch is published a second time.
import diagnosticsChannel from 'node:diagnostics_channel';
import { KAFKA_COMMITTED_CHANNEL, PROGRESS_READ_CHANNEL } from '../../src/relay/transactionalUnit.js';

let killAtNextCommit = false;
process.on('SIGUSR2', () => {
  killAtNextCommit = true;
});
diagnosticsChannel.subscribe(KAFKA_COMMITTED_CHANNEL, () => {
  if (killAtNextCommit) process.kill(process.pid, 'SIGKILL');
});
if (process.env.FAULTS_PROGRESS === 'off') {
  diagnosticsChannel.subscribe(PROGRESS_READ_CHANNEL, (message) => {
    (message as { ids: number[] }).ids = [];
  });
}
