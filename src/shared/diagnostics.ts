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
}

const relayStarted = diagnosticsChannel.channel(RELAY_STARTED_CHANNEL);

/** Announce a started relay; costs nothing when no one subscribes. */
export function publishRelayStarted(message: RelayStartedMessage): void {
  if (relayStarted.hasSubscribers) relayStarted.publish(message);
}
