-- Least-privilege roles for outbox-relay: a template for a DBA, not a migration.
-- `outbox-relay roles --print` (roleScript() in src/roles.ts) fills in the placeholders:
-- the schema, and the role names (default outbox_relay, outbox_consumer, outbox_viewer and
-- outbox_operator).
--
-- Apply it as the owner of the outbox tables, after `outbox-relay migrate`, and again
-- after every upgrade that adds migrations (it is idempotent: it revokes, then grants).
-- The roles are NOLOGIN groups; give each service a login role in the group, e.g.
--   CREATE ROLE orders_relay LOGIN PASSWORD '...' IN ROLE outbox_relay;
-- Run every relay of one outbox under the SAME login role: a relay taking over a shard
-- terminates the stale owner's connections (pg_terminate_backend), which PostgreSQL
-- allows on backends of roles the caller has the privileges of, and pg_stat_activity
-- shows backend_start only for those. Then no membership in pg_signal_backend is needed.
-- No role here can create, alter, drop or truncate anything: `migrate` runs as the owner.

-- Each role once; two scripts applying at the same time both find it missing, and the
-- second CREATE fails on the catalog's unique index: that one is there now, as wanted.
DO $$
DECLARE
  name text;
BEGIN
  FOREACH name IN ARRAY ARRAY[':"relay_role"', ':"consumer_role"', ':"viewer_role"', ':"operator_role"'] LOOP
    IF to_regrole(name) IS NULL THEN
      BEGIN
        EXECUTE 'CREATE ROLE ' || name || ' NOLOGIN';
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END
$$;

-- Start from nothing, so the grants below are exactly what each role has here.
REVOKE ALL ON ALL TABLES IN SCHEMA :"schema" FROM :"relay_role", :"consumer_role", :"viewer_role", :"operator_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA :"schema" FROM :"relay_role", :"consumer_role", :"viewer_role", :"operator_role";

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
-- Its per-minute counts for the console (migration 010): written, and pruned past two hours.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".outbox_relay_minutes TO :"relay_role";

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

-- The console's viewer (`outbox-relay console`, `status`, `dead-letters list`): reads, and
-- changes nothing. Of the outbox it sees what the backlog and the parked keys need, never
-- a pending row's payload or headers; dead letters it sees whole (the console shows them).
GRANT USAGE ON SCHEMA :"schema" TO :"viewer_role";
GRANT SELECT ON :"schema".outbox_migrations TO :"viewer_role";
GRANT SELECT (id, message_id, topic, key, created_at, shard, sent_at, attempts, last_error, dedup_key) ON :"schema".outbox TO :"viewer_role";
GRANT SELECT ON SEQUENCE :"schema".outbox_id_seq TO :"viewer_role";
GRANT SELECT ON :"schema".outbox_dead_letters, :"schema".outbox_parked_keys, :"schema".outbox_relays,
                :"schema".outbox_shard_leases, :"schema".outbox_relay_minutes TO :"viewer_role";

-- The console's operator: what the viewer reads, and the ways out of the dead letters
-- (`dead-letters replay | discard | unpark`, the console's buttons).
GRANT USAGE ON SCHEMA :"schema" TO :"operator_role";
GRANT SELECT ON :"schema".outbox_migrations TO :"operator_role";
GRANT SELECT (id, message_id, topic, key, created_at, shard, sent_at, attempts, last_error, dedup_key) ON :"schema".outbox TO :"operator_role";
GRANT SELECT ON SEQUENCE :"schema".outbox_id_seq TO :"operator_role";
GRANT SELECT ON :"schema".outbox_relays, :"schema".outbox_shard_leases, :"schema".outbox_relay_minutes TO :"operator_role";
-- A replay puts a dead letter back into the outbox under its own id and message id (so no
-- sequence privilege) as a pending row; it publishes nothing itself.
GRANT INSERT (id, message_id, topic, key, payload, payload_bytes, headers, created_at, dedup_key) ON :"schema".outbox TO :"operator_role";
-- Replay and discard delete dead letters (a replay locks them first: FOR UPDATE needs
-- UPDATE); unpark marks a key's park dead letters skip.
GRANT SELECT, DELETE ON :"schema".outbox_dead_letters TO :"operator_role";
GRANT UPDATE (policy) ON :"schema".outbox_dead_letters TO :"operator_role";
-- Releasing a key, or handing it on to the key's next park dead letter.
GRANT SELECT, DELETE ON :"schema".outbox_parked_keys TO :"operator_role";
GRANT UPDATE (dead_letter_id) ON :"schema".outbox_parked_keys TO :"operator_role";
