/**
 * Which Kafka transaction wrote each copy of a record that a fault run's read_committed
 * reader saw twice (docs/faults.md, finding 6). Reads the partition logs a run left
 * behind (FAULTS_KEEP_KAFKA=1, test/faults/servers.ts) with Kafka's own DumpLogSegments,
 * and prints, for every record (key and payload) that more than one committed transaction
 * holds, each copy's batch: producer id, epoch, sequence range, and the control marker
 * (COMMIT or ABORT, with its epoch) that ended its transaction in that partition. Two
 * copies under one producer id and epoch inside one transaction are a client resend; under
 * two commits, two transactions published the row.
 *
 *   npx tsx test/faults/txnLog.ts .cache/kafka/run/faults-cluster-PID [node-1]
 *
 * The payload of the fault workload names its writer, transaction time and row number, so
 * two different rows rarely share key and payload; the few that do (a writer's rows of one
 * hot key in one transaction) show as two copies in one batch, which a resend never is.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './snapshot.js';

interface Batch {
  partition: string;
  base: number;
  last: number;
  baseSequence: number;
  lastSequence: number;
  producerId: number;
  epoch: number;
  control: boolean;
}
interface Marker {
  offset: number;
  type: string;
  epoch: number;
}

const [runDir, node = 'node-1'] = process.argv.slice(2);
if (!runDir) throw new Error('usage: txnLog.ts RUN_DIR [node-N]');
const data = join(runDir, node, 'data');
// The run's topic partitions: not Kafka's internal topics, not the exactly-once progress topic.
const partitions = readdirSync(data).filter((d) => d.startsWith('faults-') && !/\.progress-\d+$/.test(d));
const files = partitions.flatMap((p) => readdirSync(join(data, p)).filter((f) => f.endsWith('.log')).map((f) => join(data, p, f)));
const dump = execFileSync('java', ['-cp', join(ROOT, '.cache/kafka/libs/*'), 'kafka.tools.DumpLogSegments', '--print-data-log', '--files', files.join(',')], {
  encoding: 'utf8',
  maxBuffer: 1 << 30,
  stdio: ['ignore', 'pipe', 'ignore'],
});

const batchLine = /^baseOffset: (\d+) lastOffset: (\d+) count: \d+ baseSequence: (-?\d+) lastSequence: (-?\d+) producerId: (-?\d+) producerEpoch: (-?\d+) .*isControl: (\w+)/;
const markerLine = /^\| offset: (\d+) .*endTxnMarker: (\w+)/;
const recordLine = /^\| offset: (\d+) .*?key: (\S+) payload: (.*)$/;
const copies = new Map<string, Array<{ offset: number; batch: Batch }>>();
const markers = new Map<string, Marker[]>();
let partition = '';
let batch: Batch | undefined;
for (const line of dump.split('\n')) {
  if (line.startsWith('Dumping ')) {
    partition = line.split('/').at(-2) ?? '';
    continue;
  }
  let m = batchLine.exec(line);
  if (m) {
    batch = { partition, base: +m[1]!, last: +m[2]!, baseSequence: +m[3]!, lastSequence: +m[4]!, producerId: +m[5]!, epoch: +m[6]!, control: m[7] === 'true' };
    continue;
  }
  if (!batch) continue;
  m = markerLine.exec(line);
  if (m && batch.control) {
    const key = `${partition}/${batch.producerId}`;
    markers.set(key, [...(markers.get(key) ?? []), { offset: +m[1]!, type: m[2]!, epoch: batch.epoch }]);
    continue;
  }
  m = recordLine.exec(line);
  if (m) {
    const key = `${partition}\u0000${m[2]}\u0000${m[3]}`;
    copies.set(key, [...(copies.get(key) ?? []), { offset: +m[1]!, batch }]);
  }
}

/** The marker that ended the transaction holding `b` in its partition; undefined while open. */
const endOf = (b: Batch): Marker | undefined => markers.get(`${b.partition}/${b.producerId}`)?.find((mk) => mk.offset > b.last);
const describe = (b: Batch, offset: number): string => {
  const end = endOf(b);
  return `${b.partition} offset ${offset}: batch ${b.base}-${b.last} producerId ${b.producerId} epoch ${b.epoch} sequence ${b.baseSequence}-${b.lastSequence} -> ${end ? `${end.type} at ${end.offset} (epoch ${end.epoch})` : 'OPEN'}`;
};

let records = 0;
const pairs = new Map<string, number>();
for (const [key, list] of copies) {
  records++;
  const committed = list.filter((c) => endOf(c.batch)?.type === 'COMMIT');
  if (committed.length < 2) continue;
  const pair = committed.map((c) => `${c.batch.partition}@${c.batch.base}`).join(' + ');
  pairs.set(pair, (pairs.get(pair) ?? 0) + 1);
  if (pairs.get(pair)! > 3) continue; // a few examples of each pair of batches
  const [, k, payload] = key.split('\u0000');
  console.log(`key ${k} payload ${payload}`);
  for (const c of list) console.log(`   ${describe(c.batch, c.offset)}`);
}
console.log(`${records} distinct records in ${partitions.length} partitions; records in more than one committed copy, by pair of batches:`);
for (const [pair, n] of pairs) console.log(`   ${pair}: ${n}`);
