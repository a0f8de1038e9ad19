import { execFileSync } from 'node:child_process';
import { compiledAgainstKafka, KAFKA_LIBS } from '../../scripts/kafkaJava.js';

// Kafka Connect's own JsonConverter and Kafka's own murmur2 partitioner, run through
// test/fixtures/JsonConverterProbe.java (compiled here with javac, against the jars
// scripts/kafka-fetch.sh downloads). The tests compare the relay's bytes with these.


/** The Connect schema the Postgres connector gives a column; `none` is the event router's tombstone (no schema, no value). */
export type ProbeKind = 'string' | 'json' | 'uuid' | 'int16' | 'int32' | 'int64' | 'boolean' | 'bytes' | 'none';

/** One value handed to `JsonConverter.fromConnectData`. */
export interface ProbeCase {
  kind: ProbeKind;
  /** The value: text (numbers and booleans as text) or, for `bytes`, the bytes; null for a null value. */
  value: string | Buffer | null;
}

/** What the converter wrote, and where Kafka's partitioner puts those bytes as a key. */
export interface ProbeResult {
  /** null: the converter returned null (a tombstone, or a null key). */
  bytes: Buffer | null;
  /** `Utils.toPositive(Utils.murmur2(bytes)) % partitions`; undefined for null bytes. */
  partition: number | undefined;
}


/** Run every case through Kafka's JsonConverter (schemas.enable=false) in one JVM. */
export function jsonConverter(cases: readonly ProbeCase[], partitions: number): ProbeResult[] {
  const classes = compiledAgainstKafka('test/fixtures/JsonConverterProbe.java', 'connect-json-');
  const input = cases
    .map((c) => {
      const value = c.value === null ? '-' : (typeof c.value === 'string' ? Buffer.from(c.value, 'utf8') : c.value).toString('base64');
      return `${c.kind}\t${value}\t${partitions}\n`;
    })
    .join('');
  const output = execFileSync('java', ['-cp', `${classes}:${KAFKA_LIBS}/*`, 'JsonConverterProbe'], {
    input,
    maxBuffer: 256 * 1024 * 1024,
    // stderr is kept for the error (it also carries reload4j's "no appenders" warning).
    stdio: ['pipe', 'pipe', 'pipe'],
  }).toString('utf8');
  const lines = output.split('\n').filter((l) => l !== '');
  if (lines.length !== cases.length) throw new Error(`JsonConverterProbe answered ${lines.length} of ${cases.length} cases`);
  return lines.map((line) => {
    const [hex = '', partition = ''] = line.split('\t');
    return hex === '-' ? { bytes: null, partition: undefined } : { bytes: Buffer.from(hex, 'hex'), partition: Number(partition) };
  });
}
