-- A key is parked exactly while it has dead letters with policy park, whatever changes them
-- (issue 33, item 10; docs/operations-dead-letters.md, "Parked keys follow their dead letters").
--
-- Before this, only the commands kept outbox_parked_keys in step: a dead letter deleted or
-- re-keyed with SQL (its topic corrected by an UPDATE, then replayed) left its key parked
-- behind a dead letter that no longer existed, for ever. The triggers below keep the park
-- in step in the transaction that changes the dead letters: after a DELETE, an UPDATE of
-- topic, key or policy, or a TRUNCATE, each key concerned is parked behind its lowest
-- dead letter with policy park, or released when it has none left.
--
-- Why triggers, and not the relay tidying up later or the park derived at claim time: the
-- release happens in the changing transaction (no window in which the key is parked with
-- nothing to replay, no sweep to schedule), and the claim keeps its one primary-key probe
-- of outbox_parked_keys per row. Cost: one probe of that primary key and one of the dead
-- letters' (topic, md5(key), id) index per key a statement touches, and only for dead
-- letters with policy park.
--
-- Concurrency: the key's park row is locked (FOR UPDATE) before the dead letters are
-- counted, and in READ COMMITTED each statement of the function takes a new snapshot, so
-- two transactions removing two park dead letters of one key at once cannot both see the
-- other's still there: the second waits for the first's lock, then counts what the first
-- committed. Keys are locked in (topic, key) order, so two statements over the same keys
-- do not deadlock.
--
-- Inserting a dead letter by hand parks nothing (the relay parks the keys of the dead
-- letters it makes, in the same statement); `outbox-relay status` counts such a dead
-- letter, and a park row left without its dead letter, as "parked keys out of step".

CREATE FUNCTION :"schema".outbox_parked_keys_follow(topics text[], keys text[]) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  k record;
  lowest bigint;
BEGIN
  FOR k IN SELECT DISTINCT t.topic, t.key FROM unnest(topics, keys) AS t(topic, key) ORDER BY t.topic, t.key LOOP
    PERFORM 1 FROM :"schema".outbox_parked_keys AS p WHERE p.topic = k.topic AND p.key = k.key FOR UPDATE;
    SELECT min(d.id) INTO lowest
      FROM :"schema".outbox_dead_letters AS d
     WHERE d.topic = k.topic AND md5(d.key) = md5(k.key) AND d.key = k.key AND d.policy = 'park';
    IF lowest IS NULL THEN
      DELETE FROM :"schema".outbox_parked_keys AS p WHERE p.topic = k.topic AND p.key = k.key;
    ELSE
      INSERT INTO :"schema".outbox_parked_keys AS p (topic, key, dead_letter_id)
      VALUES (k.topic, k.key, lowest)
      ON CONFLICT (topic, key) DO UPDATE SET dead_letter_id = EXCLUDED.dead_letter_id
       WHERE p.dead_letter_id <> EXCLUDED.dead_letter_id;
    END IF;
  END LOOP;
END
$$;

-- SECURITY DEFINER, as the claim-floor trigger of 005: whoever deletes or updates a dead
-- letter (an operator, the relay) keeps the park in step without a grant of its own.
CREATE FUNCTION :"schema".outbox_dead_letters_parks() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM :"schema".outbox_parked_keys_follow(
      ARRAY(SELECT topic FROM old_rows WHERE policy = 'park' ORDER BY topic, key),
      ARRAY(SELECT key FROM old_rows WHERE policy = 'park' ORDER BY topic, key));
  ELSE
    -- The keys the rows left and the keys they went to, each only where a park dead
    -- letter was or now is (a skip dead letter never parks, so it changes nothing).
    PERFORM :"schema".outbox_parked_keys_follow(
      ARRAY(SELECT topic FROM (SELECT topic, key FROM old_rows WHERE policy = 'park'
                               UNION SELECT topic, key FROM new_rows WHERE policy = 'park') AS c ORDER BY topic, key),
      ARRAY(SELECT key FROM (SELECT topic, key FROM old_rows WHERE policy = 'park'
                             UNION SELECT topic, key FROM new_rows WHERE policy = 'park') AS c ORDER BY topic, key));
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER outbox_dead_letters_parks_delete
  AFTER DELETE ON :"schema".outbox_dead_letters
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_dead_letters_parks();
CREATE TRIGGER outbox_dead_letters_parks_update
  AFTER UPDATE ON :"schema".outbox_dead_letters
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_dead_letters_parks();

-- TRUNCATE has no transition table: every dead letter is gone, so is every park.
CREATE FUNCTION :"schema".outbox_dead_letters_parks_truncate() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  DELETE FROM :"schema".outbox_parked_keys;
  RETURN NULL;
END
$$;
CREATE TRIGGER outbox_dead_letters_parks_truncate
  AFTER TRUNCATE ON :"schema".outbox_dead_letters
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_dead_letters_parks_truncate();

-- Parks already orphaned before this migration (their dead letter deleted or re-keyed by
-- SQL): released, or handed to the key's lowest remaining park dead letter.
SELECT :"schema".outbox_parked_keys_follow(
  coalesce(array_agg(p.topic ORDER BY p.topic, p.key), '{}'),
  coalesce(array_agg(p.key ORDER BY p.topic, p.key), '{}'))
  FROM :"schema".outbox_parked_keys AS p
 WHERE NOT EXISTS (SELECT 1 FROM :"schema".outbox_dead_letters AS d
                    WHERE d.id = p.dead_letter_id AND d.topic = p.topic AND d.key = p.key AND d.policy = 'park');
