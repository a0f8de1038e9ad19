-- Debezium-shaped outbox tables (docs/debezium.md, src/commands/debeziumOutbox.ts).
--
-- Writers of a table shaped for Debezium's outbox event router (id, aggregatetype,
-- aggregateid, type, payload, ...) keep writing it unchanged. `outbox-relay debezium
-- attach` puts an AFTER INSERT row trigger on that table calling this function, which
-- inserts the corresponding row into our outbox in the writer's own transaction. That
-- row takes its id from the outbox sequence after the writer's transaction id, as every
-- outbox row does, so the relay's visibility horizon, per-key order, dead letters and
-- replay are the same for both formats. A writer that inserts and deletes its row in one
-- transaction (what Debezium recommends, the table stays empty) is captured too: the
-- trigger fires on the insert. Updates and deletes are ignored, as the event router
-- ignores them.
--
-- One generic function; each attached table passes its settings as trigger arguments
-- (fixed text, written by `attach` after it checked the columns):
--   0 route-by column, 1 topic pattern (`${routedByValue}` replaced by that column's
--   value), 2 key column, 3 event id column, 4 its kind (uuid, other), 5 payload column,
--   6 its kind (jsonb, json, text, bytea), 7 timestamp column or '', 8 its kind (utc for
--   a timestamp without time zone, tz, or ''), 9 tombstone on empty payload (true,
--   false), 10 key converter and 11 value converter (string, json: what the connector's
--   key.converter and value.converter were), then pairs of (column, header name).
-- The kinds are the columns' types as `attach` found them: frozen into the arguments so
-- that no row pays for a catalog lookup (a third of the function's cost when it did).
-- Attach again after changing the type of a mapped column.

-- SECURITY DEFINER, owned by the migrating role, with a fixed search_path: a writer
-- needs INSERT on its own table only, no grant on the outbox. EXECUTE is revoked from
-- PUBLIC so that nobody else can attach the function to a table of theirs and write
-- into the outbox as its owner; firing a trigger does not check EXECUTE, creating one
-- does.
CREATE FUNCTION :"schema".outbox_debezium_capture() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
  route_column   text := TG_ARGV[0];
  topic_pattern  text := TG_ARGV[1];
  key_column     text := TG_ARGV[2];
  id_column      text := TG_ARGV[3];
  id_kind        text := TG_ARGV[4];
  payload_column text := TG_ARGV[5];
  payload_kind   text := TG_ARGV[6];
  ts_column      text := TG_ARGV[7];
  ts_kind        text := TG_ARGV[8];
  tombstone_on_empty boolean := TG_ARGV[9] = 'true';
  key_json       boolean := TG_ARGV[10] = 'json';
  value_json     boolean := TG_ARGV[11] = 'json';
  -- The row as jsonb, read once: static SQL only, so every statement here keeps its
  -- plan for the session (dynamic SQL, planned per row, cost five times as much).
  -- Columns come out in their JSON text form: text as is, numbers and booleans as
  -- ::text writes them, timestamps in ISO 8601.
  r            jsonb := to_jsonb(NEW);
  route_value  text;
  message_id   uuid;
  topic        text;
  key          text;
  payload      jsonb;
  payload_text text;
  bytes        bytea;
  created      timestamptz := now();
  headers      jsonb;
  i integer;
BEGIN
  IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' OR TG_OP <> 'INSERT' OR TG_NARGS < 12 OR TG_NARGS % 2 = 1 THEN
    RAISE EXCEPTION 'outbox_debezium_capture must run AFTER INSERT FOR EACH ROW with 12 + 2n arguments; attach it with `outbox-relay debezium attach`';
  END IF;

  -- Topic: the pattern with the route-by value put in. A NULL value leaves the
  -- placeholder in, a name Kafka refuses: the relay dead-letters that row alone, with
  -- the pattern in its reason (the event router would fail the connector instead).
  route_value := r ->> route_column;
  topic := coalesce(replace(topic_pattern, '${routedByValue}', route_value), topic_pattern);

  -- message-id: the event id itself when it is a uuid. Otherwise a uuid derived from the
  -- table and the id, so the same event always gets the same message-id (consumers
  -- deduplicate on it) and ids of two tables do not collide.
  IF id_kind = 'uuid' THEN
    message_id := (r ->> id_column)::uuid;
  ELSE
    message_id := md5(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ':' || (r ->> id_column))::uuid;
  END IF;

  -- Payload, byte for byte what the event router sends with the String converter
  -- (text, json, jsonb) or the ByteArray/BinaryData converter (bytea). jsonb goes to the
  -- payload column: the relay sends its text, which is what logical decoding hands
  -- Debezium. json keeps its original text (to_json embeds it as written), so it goes
  -- to payload_bytes (jsonb would reorder keys and whitespace, and refuse some texts
  -- json accepts), with the content-type header the relay gives JSON payloads. NULL is
  -- a tombstone, as in the event router; an empty or blank text is one only with
  -- tombstone-on-empty (Java's trim(): characters up to U+0020). The event router never
  -- sees bytes as empty, so an empty bytea is an empty value.
  IF payload_kind = 'jsonb' THEN
    payload := r -> payload_column;
    -- to_jsonb writes SQL NULL as JSON null, so a column holding the JSON literal null
    -- reads as NULL too: a tombstone (the event router would send the text null).
    IF jsonb_typeof(payload) = 'null' THEN payload := NULL; END IF;
  ELSIF payload_kind = 'bytea' THEN
    bytes := decode(substr(r ->> payload_column, 3), 'hex');
  ELSE
    IF payload_kind = 'json' THEN
      payload_text := (to_json(NEW) -> payload_column)::text;
      IF payload_text = 'null' THEN payload_text := NULL; END IF;  -- as for jsonb
    ELSE
      payload_text := r ->> payload_column;
    END IF;
    IF tombstone_on_empty AND payload_text ~ '^[\x01-\x20]*$' THEN
      payload_text := NULL;
    END IF;
    bytes := convert_to(payload_text, 'UTF8');
  END IF;

  -- With the JSON converter (org.apache.kafka.connect.json.JsonConverter, schemas.enable
  -- false), the connector wrote the payload, a string to Kafka Connect (jsonb and json
  -- are io.debezium.data.Json strings), as a JSON string literal: {"a": 1} went out as
  -- "{\"a\": 1}"; bytes as a base64 string without line breaks.
  IF value_json THEN
    IF payload IS NOT NULL THEN
      payload := to_jsonb(payload::text);
    ELSIF payload_kind = 'bytea' AND bytes IS NOT NULL THEN
      payload := to_jsonb(translate(encode(bytes, 'base64'), E'\n', ''));
    ELSIF payload_kind <> 'bytea' AND payload_text IS NOT NULL THEN
      payload := to_jsonb(payload_text);
    END IF;
    bytes := NULL;
  END IF;

  -- The key as text (StringConverter), or as JSON (JsonConverter: a string key in
  -- quotes, a number as it is). The partition follows these bytes, as in Kafka Connect.
  IF key_json THEN
    key := CASE WHEN jsonb_typeof(r -> key_column) = 'null' THEN NULL ELSE (r -> key_column)::text END;
  ELSE
    key := r ->> key_column;
  END IF;

  -- Kafka timestamp from a column, as table.field.event.timestamp: a timestamp without
  -- time zone is read as UTC (Debezium's MicroTimestamp); NULL or no column: now().
  IF ts_kind = 'utc' THEN
    created := coalesce((r ->> ts_column)::timestamp AT TIME ZONE 'UTC', now());
  ELSIF ts_kind = 'tz' THEN
    created := coalesce((r ->> ts_column)::timestamptz, now());
  END IF;

  -- Headers: `id` (the event id, as table.field.event.id puts it), then the placed
  -- columns. NULLs are left out: outbox headers are strings.
  headers := jsonb_build_object('id', r ->> id_column);
  IF payload_kind = 'json' AND payload_text IS NOT NULL AND NOT value_json THEN
    headers := headers || jsonb_build_object('content-type', 'application/json');
  END IF;
  i := 12;
  WHILE i < TG_NARGS LOOP
    headers := headers || jsonb_build_object(TG_ARGV[i + 1], r ->> TG_ARGV[i]);
    i := i + 2;
  END LOOP;

  -- A NULL key becomes '', which the relay dead-letters (validation:empty_key): every
  -- outbox row has a key, where the event router would send a null one.
  INSERT INTO :"schema".outbox (message_id, topic, key, payload, payload_bytes, headers, created_at)
  VALUES (coalesce(message_id, gen_random_uuid()), topic, coalesce(key, ''), payload, bytes,
          jsonb_strip_nulls(headers), created);
  RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION :"schema".outbox_debezium_capture() FROM PUBLIC;
