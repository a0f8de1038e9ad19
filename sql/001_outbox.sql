-- The outbox. An application enqueues inside its own transaction with
--   INSERT INTO outbox (topic, key, payload) VALUES ($1, $2, $3);
-- every other column has a default.
--
-- The schema placeholder (a colon and "schema", as psql writes a quoted variable) is
-- replaced by the configured schema name, validated and quoted;
-- `outbox-relay migrate --print` shows the SQL with it filled in.

CREATE SEQUENCE :"schema".outbox_id_seq AS bigint;
-- CACHE must stay 1: the relay's visibility horizon reads last_value and relies on every
-- id at or below it being taken already.

CREATE TABLE :"schema".outbox (
  -- The CASE makes the inserting transaction take its transaction id before it takes
  -- an outbox id. The relay's visibility horizon depends on that order (see
  -- src/sql/horizon.ts): any transaction holding an id it has read is then older than
  -- the snapshot it compares against.
  id            bigint      NOT NULL
                DEFAULT (CASE WHEN pg_current_xact_id() IS NOT NULL
                              THEN nextval(':"schema".outbox_id_seq') END),
  -- Stable id of the event; travels as the Kafka header message-id and is what consumers
  -- deduplicate on. Kept across replays.
  message_id    uuid        NOT NULL DEFAULT gen_random_uuid(),
  topic         text        NOT NULL,
  -- Entity key: the Kafka message key. One key, one partition, in id order.
  key           text        NOT NULL,
  -- JSON payload. Use payload_bytes instead for pre-encoded (Avro, Protobuf) values;
  -- both NULL publishes a tombstone.
  payload       jsonb,
  payload_bytes bytea,
  -- Extra Kafka headers: a JSON object of string values (e.g. traceparent).
  headers       jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  -- Fixed hash bucket of the key: the unit of work a relay owns. 256 buckets; changing
  -- the count would remap keys and needs a drained outbox.
  shard         smallint    NOT NULL GENERATED ALWAYS AS ((hashtext(key) & 255)::smallint) STORED,
  sent_at       timestamptz,
  attempts      integer     NOT NULL DEFAULT 0,
  last_error    text,
  CONSTRAINT outbox_pkey PRIMARY KEY (id),
  CONSTRAINT outbox_one_payload CHECK (payload IS NULL OR payload_bytes IS NULL),
  CONSTRAINT outbox_headers_object CHECK (headers IS NULL OR jsonb_typeof(headers) = 'object')
);

ALTER SEQUENCE :"schema".outbox_id_seq OWNED BY :"schema".outbox.id;

-- Claims scan only unsent rows, in id order; the index stays as small as the backlog.
CREATE INDEX outbox_unsent_idx ON :"schema".outbox (id) WHERE sent_at IS NULL;
