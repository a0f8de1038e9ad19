-- Least-privilege roles for outbox-relay: a template for a DBA, not a migration.
-- `outbox-relay roles --print` (roleScript() in src/roles.ts) fills in the placeholders:
-- the schema, and the role names (default outbox_relay and outbox_consumer).
--
-- Apply it as the owner of the outbox tables, after `outbox-relay migrate`, and again
-- after every upgrade that adds migrations (it is idempotent: it revokes, then grants).
-- The roles are NOLOGIN groups; give each service a login role in the group, e.g.
--   CREATE ROLE orders_relay LOGIN PASSWORD '...' IN ROLE outbox_relay;
-- Run every relay of one outbox under the SAME login role: a relay taking over a shard
-- terminates the stale owner's connections (pg_terminate_backend), which PostgreSQL
-- allows on backends of roles the caller has the privileges of, and pg_stat_activity
-- shows backend_start only for those. Then no membership in pg_signal_backend is needed.
-- Neither role can create, alter, drop or truncate anything: `migrate` runs as the owner.

DO $$
BEGIN
  IF to_regrole(':"relay_role"') IS NULL THEN
    CREATE ROLE :"relay_role" NOLOGIN;
  END IF;
  IF to_regrole(':"consumer_role"') IS NULL THEN
    CREATE ROLE :"consumer_role" NOLOGIN;
  END IF;
END
$$;

-- Start from nothing, so the grants below are exactly what each role has here.
REVOKE ALL ON ALL TABLES IN SCHEMA :"schema" FROM :"relay_role", :"consumer_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA :"schema" FROM :"relay_role", :"consumer_role";

-- The relay (`outbox-relay run`, `status`, the metrics sampler).
GRANT USAGE ON SCHEMA :"schema" TO :"relay_role";
-- Checks the schema version at start.
GRANT SELECT ON :"schema".outbox_migrations TO :"relay_role";
-- Claims rows (SELECT ... FOR UPDATE needs UPDATE), marks them sent, records failed
-- attempts, deletes rows it moves to the dead letters or cleans up after publishing.
-- No INSERT: only applications enqueue.
GRANT SELECT, DELETE ON :"schema".outbox TO :"relay_role";
GRANT UPDATE (sent_at, attempts, last_error) ON :"schema".outbox TO :"relay_role";
-- The visibility horizon and the ingress metric read the sequence's last value.
GRANT SELECT ON SEQUENCE :"schema".outbox_id_seq TO :"relay_role";
-- Membership and shard leases (migration 003).
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".outbox_relays TO :"relay_role";
GRANT SELECT, UPDATE ON :"schema".outbox_shard_leases TO :"relay_role";
-- Dead letters and parked keys (migration 004).
GRANT SELECT, INSERT, DELETE ON :"schema".outbox_dead_letters TO :"relay_role";
GRANT SELECT, INSERT, DELETE ON :"schema".outbox_parked_keys TO :"relay_role";
-- Where claims may start (migration 005; its triggers bump it as the table owner).
GRANT SELECT ON :"schema".outbox_claim_floors TO :"relay_role";

-- The consumer runtime. Grants on the handler's own tables are the application's.
GRANT USAGE ON SCHEMA :"schema" TO :"consumer_role";
GRANT SELECT ON :"schema".outbox_migrations TO :"consumer_role";
-- Records idempotency keys; takes back the keys of failed messages; the retention purge.
GRANT SELECT, INSERT, DELETE ON :"schema".processed_messages TO :"consumer_role";
-- The purge picks its batch FOR UPDATE SKIP LOCKED, which needs UPDATE on some column.
GRANT UPDATE (processed_at) ON :"schema".processed_messages TO :"consumer_role";
-- The version gate.
GRANT SELECT, INSERT, UPDATE ON :"schema".entity_versions TO :"consumer_role";
-- The effect guard's Postgres store (migration 009, outbox-relay/effects): reserve, renew,
-- confirm, release and forget keys; purgeExpired deletes rows past their TTL.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".effect_keys TO :"consumer_role";
