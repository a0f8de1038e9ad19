import { execFile } from 'node:child_process';
import { compiledAgainstKafka, KAFKA_LIBS } from '../../scripts/kafkaJava.js';
import { promisify } from 'node:util';
import { testBrokers } from './kafka.js';

// A topic read as a read_committed reader of Kafka's own client sees it
// (test/fixtures/CommittedReader.java, compiled here with javac against the jars
// scripts/kafka-fetch.sh downloads): the reference for what exactly-once delivery
// promises. Not kafkajs: its read_committed filter (consumer/filterAbortedMessages.js)
// moves into at most one aborted transaction per record, so when the aborts of several
// producers start before a record, records of the later ones get through
// (test/committedReader.integration.test.ts shows it).


/** One record as Kafka's read_committed consumer delivered it. */
export interface CommittedRecord {
  partition: number;
  offset: number;
  key: string | null;
  /** The `outbox-id` header, when present. */
  outboxId: number | undefined;
  /** The `message-id` header, when present. */
  messageId: string | undefined;
}


/** Every record of `topic` a read_committed reader gets, per partition in offset order. */
export async function readCommittedWithKafka(topic: string, options: { brokers?: string[]; timeoutMs?: number } = {}): Promise<CommittedRecord[]> {
  return (await readWithKafka(topic, 'read_committed', options)).records;
}

/** The same with either isolation level, and the end offsets the reader read to, by partition. */
export async function readWithKafka(
  topic: string,
  isolation: 'read_committed' | 'read_uncommitted',
  { brokers = testBrokers(), timeoutMs = 120_000 }: { brokers?: string[]; timeoutMs?: number } = {},
): Promise<{ records: CommittedRecord[]; ends: Map<number, number> }> {
  const classes = compiledAgainstKafka('test/fixtures/CommittedReader.java');
  const { stdout, stderr } = await promisify(execFile)('java', ['-cp', `${classes}:${KAFKA_LIBS}/*`, 'CommittedReader', brokers.join(','), topic, String(timeoutMs), isolation], {
    maxBuffer: 512 * 1024 * 1024,
  });
  const ends = new Map<number, number>();
  for (const line of stderr.split('\n')) {
    const [tag, partition, end] = line.split('\t');
    if (tag === 'end') ends.set(Number(partition), Number(end));
  }
  const records = stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((line) => {
      const [partition, offset, key, outboxId, messageId] = line.split('\t') as [string, string, string, string, string];
      return {
        partition: Number(partition),
        offset: Number(offset),
        key: key === '-' ? null : key,
        outboxId: outboxId === '-' ? undefined : Number(outboxId),
        messageId: messageId === '-' ? undefined : messageId,
      };
    });
  return { records, ends };
}
