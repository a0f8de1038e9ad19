// Kafka's own rule for topic names (org.apache.kafka.common.internals.Topic): 1-249
// characters of A-Z a-z 0-9 . _ -, and neither "." nor "..". One copy, used by the
// relay's row validation, the consumer's options and the settings that name topics.

const LEGAL = /^[A-Za-z0-9._-]{1,249}$/;

/** What is wrong with a Kafka topic name, or undefined when Kafka accepts it. */
export function topicNameProblem(name: unknown): string | undefined {
  if (typeof name === 'string' && LEGAL.test(name) && name !== '.' && name !== '..') return undefined;
  const shown = typeof name === 'string' ? JSON.stringify(name.slice(0, 300)) : String(name);
  return `${shown} is not a legal Kafka topic name (1-249 of A-Z a-z 0-9 . _ -, not "." or "..")`;
}

/** True when Kafka accepts `name` as a topic name. */
export function isTopicName(name: unknown): name is string {
  return topicNameProblem(name) === undefined;
}
