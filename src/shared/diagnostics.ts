import diagnosticsChannel from 'node:diagnostics_channel';

/**
 * Name of the `node:diagnostics_channel` channel on which every relay announces itself
 * once it has started. Observers (a test harness, an APM agent) subscribe by name, so
 * they see relays of any copy of this package loaded in the process.
 */
const RELAY_STARTED_CHANNEL = 'outbox-relay:relay-started';

/** What a started relay announces on {@link RELAY_STARTED_CHANNEL}. */
export interface RelayStartedMessage {
  /** The producer adapter it publishes through. */
  producer: string;
  /** The outbox's schema. */
  schema: string;
  /** `at-least-once` or `exactly-once` (the relay's `delivery` option). */
  delivery: string;
  /** Exactly-once mode: its units of shards (the `exactlyOnceUnits` option). */
  units?: number;
}

const relayStarted = diagnosticsChannel.channel(RELAY_STARTED_CHANNEL);

/** Announce a started relay; costs nothing when no one subscribes. */
export function publishRelayStarted(message: RelayStartedMessage): void {
  if (relayStarted.hasSubscribers) relayStarted.publish(message);
}

/**
 * Name of the channel on which every consumer announces itself once it has started, as
 * relays do on {@link RELAY_STARTED_CHANNEL}: a harness can tell which Kafka client a
 * consumer it measured ran on from the consumer itself.
 */
const CONSUMER_STARTED_CHANNEL = 'outbox-relay:consumer-started';

/** What a started consumer announces on {@link CONSUMER_STARTED_CHANNEL}. */
export interface ConsumerStartedMessage {
  /** The Kafka client it consumes (and dead-letters) through. */
  client: 'kafkajs';
  groupId: string;
  /** `handler` (one message per call) or `handleBatch`. */
  handler: 'handler' | 'handleBatch';
}

const consumerStarted = diagnosticsChannel.channel(CONSUMER_STARTED_CHANNEL);

/** Announce a started consumer; costs nothing when no one subscribes. */
export function publishConsumerStarted(message: ConsumerStartedMessage): void {
  if (consumerStarted.hasSubscribers) consumerStarted.publish(message);
}
