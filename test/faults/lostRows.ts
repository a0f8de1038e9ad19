/**
 * Where an exactly-once run's lost rows are (harness.ts): never written, or written behind
 * a transaction still open, which holds a read_committed reader at the partition's last
 * stable offset? The topic is read both ways and the answer logged.
 */
import { readWithKafka } from '../helpers/committedReader.js';
import type { CheckResult } from './checker.js';

export async function logWhereLostRowsAre(topic: string, brokers: string[], result: CheckResult, log: (line: string) => void): Promise<void> {
  try {
    const committed = await readWithKafka(topic, 'read_committed', { brokers, timeoutMs: 60_000 });
    const everything = await readWithKafka(topic, 'read_uncommitted', { brokers, timeoutMs: 60_000 });
    const lostIds = new Set((result.examples.lost ?? []).map((e) => e.outboxId));
    log(`lost rows: read_committed ends ${[...committed.ends].map(([p, e]) => `${p}:${e}`).join(' ')}; read_uncommitted ends ${[...everything.ends].map(([p, e]) => `${p}:${e}`).join(' ')}`);
    for (const r of everything.records.filter((x) => lostIds.has(x.outboxId))) log(`lost row ${r.outboxId} is in partition ${r.partition} at offset ${r.offset} for a read_uncommitted reader`);
  } catch (error) {
    log(`could not read the topic again: ${(error as Error).message}`);
  }
}
