// Reads a run of run.mts (README.md) for summarize.mjs and table.mjs: its Kafka requests
// and its latency figures, and checks the run is what its name says. Throws when the relay
// recorded no request (the preload did not load), or when its rows were acknowledged
// through another client or mode than the arm's (eos: platformatic transactions; alo:
// platformatic sends).
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { basename, dirname, join } from 'node:path';

/** Kafka's API keys of the requests a relay sends. */
export const API_NAMES = { 0: 'Produce', 3: 'Metadata', 8: 'OffsetCommit', 9: 'OffsetFetch', 10: 'FindCoordinator', 18: 'ApiVersions', 22: 'InitProducerId', 24: 'AddPartitionsToTxn', 25: 'AddOffsetsToTxn', 26: 'EndTxn', 28: 'TxnOffsetCommit' };

/** The client and mode every row of an arm must have been acknowledged through. */
const ACKED_VIA = { eos: 'platformatic transaction', alo: 'platformatic' };

export const percentile = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN);

/** `dir`: a run's directory, <tag>-<arm>-<rate>. */
export function readRun(dir) {
  const [tag, arm, rate] = basename(dir).split('-');
  // One requests-<pid>.jsonl per relay process as run.mts leaves them, or requests.jsonl.gz (committed).
  const text = (f) => (f.endsWith('.gz') ? gunzipSync(readFileSync(join(dir, f))) : readFileSync(join(dir, f))).toString('utf8');
  const requests = readdirSync(dir)
    .filter((f) => f.startsWith('requests'))
    .flatMap((f) => text(f).split('\n').filter(Boolean).map((l) => JSON.parse(l)));
  if (requests.length === 0) throw new Error(`${dir}: no request recorded (was requests.mjs preloaded?)`);
  const latencyFile = join(dirname(dir), `latency-${tag}-${rate}.json`);
  const latency = existsSync(latencyFile) ? JSON.parse(readFileSync(latencyFile, 'utf8')).results[arm] : undefined;
  if (!latency) throw new Error(`${dir}: no ${arm} result in ${latencyFile}`);
  const other = Object.entries(latency.via).filter(([via, n]) => via !== ACKED_VIA[arm] && n > 0);
  if (other.length > 0 || !(latency.via[ACKED_VIA[arm]] > 0)) throw new Error(`${dir}: rows acknowledged through ${JSON.stringify(latency.via)}, not only ${ACKED_VIA[arm]}`);
  const at = requests.map((r) => r.at);
  return { tag, arm, rate: Number(rate), requests, latency, seconds: (Math.max(...at) - Math.min(...at)) / 1000 };
}
