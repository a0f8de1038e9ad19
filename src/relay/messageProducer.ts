import type { RelayMessage } from './message.js';

/** What Kafka did with one message of a send. */
export type SendResult = { acknowledged: true } | { acknowledged: false; error: unknown };

/**
 * The relay's port to a broker. `send` publishes messages (in the relay's id order) and
 * answers, per message and in the same order, whether Kafka acknowledged it (acks=all)
 * or refused it, and why. It never rejects for a message's or a topic's fault, and it
 * never reports a message acknowledged that a later message of the same key depends on
 * being refused: a key's messages go to one partition in one request, in order, so they
 * are acknowledged or refused together.
 */
export interface MessageProducer {
  /**
   * Which Kafka client publishes (the `producer` setting), for logs and metrics. Each
   * adapter also logs it (info, `producer adapter publishing`, field `producer`) once, at
   * its first acknowledged message: what ran, not only what was configured.
   */
  readonly adapter: 'kafkajs' | 'platformatic';
  send(messages: readonly RelayMessage[]): Promise<SendResult[]>;
  disconnect(): Promise<void>;
}
