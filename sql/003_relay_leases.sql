-- Shard ownership for running several relays against one outbox.
--
-- Every outbox row belongs to one of 256 shards (outbox.shard, a hash of the key). At
-- most one relay owns a shard at a time; only the owner claims its rows, so one key's
-- rows are never in two relays' batches. Times come from the database's clock.

-- Relays alive, by heartbeat. A relay whose heartbeat is older than its lease TTL is
-- dead to the others.
CREATE TABLE :"schema".outbox_relays (
  relay_id          text        NOT NULL,
  -- Prefix of the application_name of every Postgres connection the relay opens: a relay
  -- taking over a shard terminates the stale owner's connections by it.
  application_name  text        NOT NULL,
  lease_ttl_ms      integer     NOT NULL,
  started_at        timestamptz NOT NULL DEFAULT now(),
  heartbeat_at      timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT outbox_relays_pkey PRIMARY KEY (relay_id)
);

-- One row per shard. owner NULL: free. expires_at: the owner must renew before it, or
-- another relay may take the shard. epoch counts ownership changes.
CREATE TABLE :"schema".outbox_shard_leases (
  shard       smallint    NOT NULL,
  owner       text,
  epoch       bigint      NOT NULL DEFAULT 0,
  expires_at  timestamptz,
  CONSTRAINT outbox_shard_leases_pkey PRIMARY KEY (shard),
  CONSTRAINT outbox_shard_leases_shard CHECK (shard BETWEEN 0 AND 255)
);

INSERT INTO :"schema".outbox_shard_leases (shard) SELECT generate_series(0, 255);
