-- A shard's lease is live while its owner's heartbeat is (issue 36, item 3).
--
-- Before, each relay renewed every lease row it held (outbox_shard_leases.expires_at) once
-- a round, a third of the lease TTL: 256 row versions every 3.3 s with one relay. While a
-- long transaction elsewhere holds the horizon back (a report, a pg_dump, an idle logical
-- slot), none of those versions can be removed, and every claim and mark of the relay read
-- the lease rows through all of them: under a 3-minute hold a claim touched 7,807 buffers
-- against 614 (bench/committed/held-horizon-leases-2026-12-05). Now a lease is live while
-- its owner is the row's owner and the owner's outbox_relays.heartbeat_at is within its
-- lease_ttl_ms; a round writes only the heartbeat, and the lease rows change only when a
-- shard changes hands. src/relay/sql/leases.ts has the statements.
--
-- expires_at stays for relays of an earlier version during a rolling upgrade: they still
-- renew it, and a shard whose expires_at is to come is not taken from them. This version
-- writes NULL there. Nothing to change in the data.

COMMENT ON COLUMN :"schema".outbox_shard_leases.expires_at IS
  'Written only by relays before migration 013; a lease is live while its owner''s outbox_relays.heartbeat_at is within lease_ttl_ms.';
