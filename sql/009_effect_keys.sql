-- effect_keys: the effect guard's Postgres store (outbox-relay/effects, docs/effects.md).
--
-- One row per guarded effect outside Postgres (an HTTP call, an email): reserved by the
-- attempt that runs it (its token, until reserved_until), then confirmed once it
-- happened (token and reserved_until NULL, confirmed_at set). The guard writes it on a
-- pool connection of its own, in autocommit statements, never inside a consumer's
-- transaction: a rollback there would erase the record of an effect that already
-- happened. Rows are dead once expires_at has passed (the guard treats them as absent);
-- postgresEffectStore(...).purgeExpired() deletes them in bounded batches.
CREATE TABLE :"schema".effect_keys (
  key            text        NOT NULL,
  token          uuid,
  reserved_until timestamptz,
  confirmed_at   timestamptz,
  expires_at     timestamptz NOT NULL,
  -- Reservations of this record: 1, plus one per expired reservation taken over.
  attempts       integer     NOT NULL DEFAULT 1,
  CONSTRAINT effect_keys_pkey PRIMARY KEY (key),
  CONSTRAINT effect_keys_state CHECK (
    (token IS NOT NULL AND reserved_until IS NOT NULL AND confirmed_at IS NULL)
    OR (token IS NULL AND reserved_until IS NULL AND confirmed_at IS NOT NULL)
  )
);

-- The purge deletes the oldest expired rows first, in bounded batches.
CREATE INDEX effect_keys_expires_at_idx ON :"schema".effect_keys (expires_at);
