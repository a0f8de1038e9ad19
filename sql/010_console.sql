-- What the operator console reads (issue 22, docs/operations.md "Console").
--
-- The console shows an outbox's flow and its relays' circuit breakers with no relay
-- process reachable: the relays write both here. Its dead-letter list pages by id
-- (keyset: id > the last id shown) within a filter; the indexes below let each filter
-- walk its matches in id order and stop at the page size, on tables of millions of rows.
--
-- Locks: CREATE INDEX (not CONCURRENTLY: a migration runs in a transaction) takes a SHARE
-- lock on outbox_dead_letters and outbox_parked_keys until the migration commits, so a
-- relay moving a row to the dead letters meanwhile waits for it; about a second per index
-- on a million dead letters. The outbox itself is not touched: no new index there, its
-- writers pay nothing for the console.

-- Rows a relay published and dead-lettered, per minute (the relay's clock, UTC), added
-- up in the relay's memory and written about once a minute and on shutdown
-- (src/relay/flowRecorder.ts). Rows older than two hours are pruned by the relays as they
-- write.
CREATE TABLE :"schema".outbox_relay_minutes (
  minute         timestamptz NOT NULL,
  relay_id       text        NOT NULL,
  sent           bigint      NOT NULL DEFAULT 0,
  dead_lettered  bigint      NOT NULL DEFAULT 0,
  -- outbox_id_seq's last_value when the relay last wrote this minute's row. Ingress of a
  -- minute is how far the highest of these rose from the minute before: ids handed out,
  -- which counts rows whose inserting transaction rolled back too (a sequence never gives
  -- an id back), and not the rows a replay moves back under their old ids.
  last_id        bigint,
  CONSTRAINT outbox_relay_minutes_pkey PRIMARY KEY (minute, relay_id)
);

-- The relay's Kafka circuit breaker, written with every heartbeat: NULL while closed,
-- else when it opened (src/relay/breaker.ts).
ALTER TABLE :"schema".outbox_relays ADD COLUMN breaker_opened_at timestamptz;

-- Dead letters of a topic, of an error name, of a key, each in id order. The topic and the
-- error name come from the relay (a Kafka topic name is at most 249 characters; an error
-- name is Kafka's or one of the relay's validations); the key can be of any length, so
-- its index holds a hash, as in 006.
CREATE INDEX outbox_dead_letters_topic_id_idx ON :"schema".outbox_dead_letters (topic, id);
CREATE INDEX outbox_dead_letters_error_name_idx ON :"schema".outbox_dead_letters (error_name, id);
CREATE INDEX outbox_dead_letters_key_idx ON :"schema".outbox_dead_letters (md5(key), id);
-- A time range's lowest and highest id, read from the index alone (src/console/sql/deadLetters.ts).
DROP INDEX :"schema".outbox_dead_letters_at_idx;
CREATE INDEX outbox_dead_letters_at_idx ON :"schema".outbox_dead_letters (dead_lettered_at, id);

-- The reason filter (a substring of the error name or the reason, any case) through a
-- trigram index, where the contrib extension pg_trgm can be had: then a rare substring is
-- found among millions of dead letters in milliseconds. pg_trgm is a trusted extension
-- (PostgreSQL 13+): a role with CREATE on the database may create it, no superuser needed.
-- It goes where CREATE EXTENSION puts it (the first schema of the search path, usually
-- public), never into this schema: dropping an outbox schema must not drop it from under
-- other outboxes. Without it (not installed, or no privilege) the migration goes on
-- without the index, and says so: the filter then reads dead letters in id order until a
-- page is full, slow only for rare substrings (docs/operations-dead-letters.md says how to
-- add the index later). A GIN index takes the SHARE lock above for its build too, some
-- seconds per million dead letters.
DO $$
DECLARE
  trgm_schema text;
BEGIN
  BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
  EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm is not available (%): the dead-letter reason filter goes without its index', SQLERRM;
  END;
  SELECT n.nspname INTO trgm_schema
    FROM pg_extension AS e JOIN pg_namespace AS n ON n.oid = e.extnamespace
   WHERE e.extname = 'pg_trgm';
  IF trgm_schema IS NOT NULL THEN
    EXECUTE 'CREATE INDEX outbox_dead_letters_text_idx ON :"schema".outbox_dead_letters'
         || ' USING gin (lower(error_name || E''\n'' || reason) ' || quote_ident(trgm_schema) || '.gin_trgm_ops)';
  END IF;
END
$$;

-- Parked keys, parked longest first (keyset: parked_at, topic, key). A parked key is
-- short enough for a btree entry already: the primary key holds it. parked_at is kept to
-- the millisecond, what a client's cursor (a JavaScript Date) can carry back exactly: with
-- microseconds, the next page would start at the last key shown again.
UPDATE :"schema".outbox_parked_keys SET parked_at = date_trunc('milliseconds', parked_at)
 WHERE parked_at <> date_trunc('milliseconds', parked_at);
ALTER TABLE :"schema".outbox_parked_keys ALTER COLUMN parked_at SET DEFAULT date_trunc('milliseconds', now());
CREATE INDEX outbox_parked_keys_parked_at_idx ON :"schema".outbox_parked_keys (parked_at, topic, key);
