-- The consumer runtime's tables (src/consumer.ts, docs/consumer.md).
--
-- processed_messages: one row per message a consumer group has handled. The consumer
-- inserts the row in the same transaction as the handler's effects, so the effects and
-- the row commit together or not at all; a redelivered message finds its row and is
-- skipped. Rows must outlive the longest redelivery or replay horizon (see
-- `outbox-relay purge-processed`).
CREATE TABLE :"schema".processed_messages (
  consumer_group text        NOT NULL,
  -- The idempotency key: the relay's message-id header unless the consumer derives one.
  key            text        NOT NULL,
  processed_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer_group, key)
);

-- The retention purge deletes the oldest rows first, in bounded batches.
CREATE INDEX processed_messages_processed_at_idx ON :"schema".processed_messages (processed_at);

-- entity_versions: the newest version a consumer has applied per entity, for the version
-- gate (src/versionGate.ts). One row per entity and scope (the consumer group by
-- default), so it grows with the number of entities, never with the number of messages.
-- Consumers that keep a version column in their own tables can gate on it instead.
CREATE TABLE :"schema".entity_versions (
  scope      text        NOT NULL,
  entity     text        NOT NULL,
  version    bigint      NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT entity_versions_pkey PRIMARY KEY (scope, entity)
);
