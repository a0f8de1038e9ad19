-- Where claims may start scanning (src/relay/floor.ts).
--
-- A relay starts each claim past the ids it has already dealt with, so that a claim does
-- not walk, from the lowest id, index entries of rows published long ago (entries that
-- stay while any snapshot older than them is open: a REPEATABLE READ report, a pg_dump).
-- That is only safe while nothing can reappear below where it starts. Rows reappear below
-- it when a dead letter leaves its table (a replay brings it back under its old id) or a
-- parked key is released (its held rows become claimable again). Both bump `generation`,
-- by the triggers below, in the transaction that does it; a claim whose floor was
-- computed under another generation scans from the start instead. One row.
CREATE TABLE :"schema".outbox_claim_floors (
  generation  bigint  NOT NULL DEFAULT 0,
  one_row     boolean NOT NULL DEFAULT true,
  CONSTRAINT outbox_claim_floors_pkey PRIMARY KEY (one_row),
  CONSTRAINT outbox_claim_floors_one_row CHECK (one_row)
);

INSERT INTO :"schema".outbox_claim_floors DEFAULT VALUES;

-- Statement-level, on the two small tables only (never on the outbox: writers must not
-- serialise on this row). SECURITY DEFINER: whoever releases a key or replays a dead
-- letter (the relay role, an operator) bumps the generation without a grant on it.
CREATE FUNCTION :"schema".outbox_claim_floors_bump() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  UPDATE :"schema".outbox_claim_floors SET generation = generation + 1;
  RETURN NULL;
END
$$;

CREATE TRIGGER outbox_dead_letters_claim_floors
  AFTER DELETE ON :"schema".outbox_dead_letters
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_claim_floors_bump();
CREATE TRIGGER outbox_dead_letters_claim_floors_truncate
  AFTER TRUNCATE ON :"schema".outbox_dead_letters
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_claim_floors_bump();
CREATE TRIGGER outbox_parked_keys_claim_floors
  AFTER DELETE OR UPDATE ON :"schema".outbox_parked_keys
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_claim_floors_bump();
CREATE TRIGGER outbox_parked_keys_claim_floors_truncate
  AFTER TRUNCATE ON :"schema".outbox_parked_keys
  FOR EACH STATEMENT EXECUTE FUNCTION :"schema".outbox_claim_floors_bump();
