import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Java programs run against Kafka's own jars (the references the tests and the bench
// compare with: Kafka's consumer, Connect's JsonConverter, Kafka's producer), compiled
// with javac against the jars scripts/kafka-fetch.sh downloads, once per source version.

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** Where Kafka's jars are: the class path's `${KAFKA_LIBS}/*`. */
export const KAFKA_LIBS = join(ROOT, '.cache/kafka/libs');

/**
 * Compile `source` (a path from the repository's root, one public class named as the
 * file) unless this version of it is compiled already; fetch Kafka's jars first when the
 * one named `needsJar` (a file name prefix) is missing. Returns the directory of its classes.
 */
export function compiledAgainstKafka(source: string, needsJar = 'kafka-clients-'): string {
  if (!existsSync(KAFKA_LIBS) || !readdirSync(KAFKA_LIBS).some((f) => f.startsWith(needsJar))) {
    execFileSync(join(ROOT, 'scripts/kafka-fetch.sh'), { stdio: ['ignore', 'inherit', 'inherit'] });
  }
  const path = join(ROOT, source);
  const className = basename(source, '.java');
  const hash = createHash('sha256').update(readFileSync(path)).digest('hex').slice(0, 16);
  const dir = join(ROOT, '.cache/java', className, hash);
  if (!existsSync(join(dir, `${className}.class`))) {
    mkdirSync(dir, { recursive: true });
    execFileSync('javac', ['-d', dir, '-cp', `${KAFKA_LIBS}/*`, path], { stdio: ['ignore', 'inherit', 'inherit'] });
  }
  return dir;
}
