-- Failures that must not stop the line: dead letters, parked keys, producer-side dedup.

-- Optional producer-side deduplication: an application that may enqueue the same event
-- twice sets dedup_key, and the second INSERT ... ON CONFLICT (dedup_key) WHERE dedup_key
-- IS NOT NULL DO NOTHING adds nothing. Unique among the rows still in the table: once a
-- row is cleaned up (or deleted on publish) its key may be used again.
ALTER TABLE :"schema".outbox ADD COLUMN dedup_key text;
CREATE UNIQUE INDEX outbox_dedup_key_idx ON :"schema".outbox (dedup_key) WHERE dedup_key IS NOT NULL;

-- Rows the relay could never publish (the broker rejects them, or they fail validation),
-- moved here whole with the reason. `outbox-relay dead-letters replay` moves a row back
-- into the outbox under its original id and message id.
CREATE TABLE :"schema".outbox_dead_letters (
  id                bigint      NOT NULL,  -- the row's outbox id
  message_id        uuid        NOT NULL,
  topic             text        NOT NULL,
  key               text        NOT NULL,
  payload           jsonb,
  payload_bytes     bytea,
  headers           jsonb,
  created_at        timestamptz NOT NULL,
  dedup_key         text,
  attempts          integer     NOT NULL,
  -- What an operator reads: why it can never be published as it is.
  reason            text        NOT NULL,
  -- Kafka's error name (e.g. MESSAGE_TOO_LARGE) or the validation that failed
  -- (e.g. validation:empty_key).
  error_name        text        NOT NULL,
  -- 'park': later rows of its key wait for it; 'skip': they went on without it.
  policy            text        NOT NULL,
  first_failed_at   timestamptz NOT NULL DEFAULT now(),
  dead_lettered_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT outbox_dead_letters_pkey PRIMARY KEY (id),
  CONSTRAINT outbox_dead_letters_policy CHECK (policy IN ('park', 'skip'))
);
CREATE INDEX outbox_dead_letters_topic_key_idx ON :"schema".outbox_dead_letters (topic, key, id);
CREATE INDEX outbox_dead_letters_at_idx ON :"schema".outbox_dead_letters (dead_lettered_at);

-- Keys whose rows wait, in order, behind a parked dead letter. The relay claims no row
-- of a parked key; replaying or discarding the dead letter releases the key.
CREATE TABLE :"schema".outbox_parked_keys (
  topic           text        NOT NULL,
  key             text        NOT NULL,
  dead_letter_id  bigint      NOT NULL,
  parked_at       timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT outbox_parked_keys_pkey PRIMARY KEY (topic, key)
);
