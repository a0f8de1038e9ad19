-- The trigger function of 008 (read 007's comments for the arguments and the
-- privileges, 008's for the converters), refusing a row whose table no longer has a
-- column the attach mapped. Without the check, a mapped column dropped or renamed after
-- the attach read as NULL: the event was captured with key '' (dead-lettered by the
-- relay), a random message id, no route, no header, and nobody was told. The writer's
-- insert fails instead, naming the column and the table, so the event is not lost in
-- silence and the change that broke the mapping shows where it was made. A column
-- added later is no concern (it is not read); a mapped column whose type changed still
-- needs a new attach (docs/debezium.md), as the kinds are trigger arguments.
CREATE OR REPLACE FUNCTION :"schema".outbox_debezium_capture() RETURNS trigger
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
  r            jsonb := to_jsonb(NEW);
  route_value  text;
  message_id   uuid;
  topic        text;
  key          text;
  payload      jsonb;
  payload_text text;
  -- The column is SQL NULL (to_jsonb and to_json write it as JSON null, like the literal).
  payload_null boolean := false;
  bytes        bytea;
  created      timestamptz := now();
  headers      jsonb;
  mapped       text[];
  missing      text;
  i integer;
BEGIN
  IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' OR TG_OP <> 'INSERT' OR TG_NARGS < 12 OR TG_NARGS % 2 = 1 THEN
    RAISE EXCEPTION 'outbox_debezium_capture must run AFTER INSERT FOR EACH ROW with 12 + 2n arguments; attach it with `outbox-relay debezium attach`';
  END IF;

  -- One `?&` over the row's keys for the common case; the name is looked for only when
  -- one is missing. TG_ARGV[12], [14], ... are the placed columns (the type header's too).
  mapped := ARRAY[route_column, key_column, id_column, payload_column];
  IF ts_column <> '' THEN
    mapped := mapped || ts_column;
  END IF;
  i := 12;
  WHILE i < TG_NARGS LOOP
    mapped := mapped || TG_ARGV[i];
    i := i + 2;
  END LOOP;
  IF NOT r ?& mapped THEN
    SELECT c INTO missing FROM unnest(mapped) AS c WHERE NOT r ? c LIMIT 1;
    RAISE EXCEPTION USING
      ERRCODE = 'undefined_column',
      MESSAGE = format('column %I of %I.%I is mapped by its outbox-relay Debezium attach (trigger %I) but the table no longer has it: the event cannot be captured',
                       missing, TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_NAME),
      HINT = 'restore the column, or attach the table again (outbox-relay debezium attach) with options naming columns it has';
  END IF;

  route_value := r ->> route_column;
  topic := coalesce(replace(topic_pattern, '${routedByValue}', route_value), topic_pattern);

  IF id_kind = 'uuid' THEN
    message_id := (r ->> id_column)::uuid;
  ELSE
    message_id := md5(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ':' || (r ->> id_column))::uuid;
  END IF;

  -- Payload as the connector read it: jsonb in Postgres' text form (what logical
  -- decoding hands Debezium), json as written, text, or bytes.
  IF payload_kind = 'jsonb' THEN
    payload := r -> payload_column;
    IF jsonb_typeof(payload) = 'null' THEN
      -- Rare, so the one dynamic statement here does not cost the common case its plan.
      EXECUTE format('SELECT ($1).%I IS NULL', payload_column) INTO payload_null USING NEW;
      IF payload_null THEN payload := NULL; END IF;
    END IF;
  ELSIF payload_kind = 'bytea' THEN
    bytes := decode(substr(r ->> payload_column, 3), 'hex');
    payload_null := bytes IS NULL;
  ELSE
    IF payload_kind = 'json' THEN
      -- The text exactly as stored, as logical decoding gives it: to_json(NEW) -> column
      -- drops whitespace before and after the document (and reads NULL as null), so
      -- this kind pays for one dynamic statement per event.
      EXECUTE format('SELECT ($1).%I::text', payload_column) INTO payload_text USING NEW;
      payload_null := payload_text IS NULL;
    ELSE
      payload_text := r ->> payload_column;
      payload_null := payload_text IS NULL;
    END IF;
    -- route.tombstone.on.empty.payload: blank after Java's trim() (up to U+0020).
    IF tombstone_on_empty AND payload_text ~ '^[\x01-\x20]*$' THEN
      payload_text := NULL;
    END IF;
    bytes := convert_to(payload_text, 'UTF8');
  END IF;

  -- JsonConverter (schemas.enable=false): the payload, a string to Kafka Connect, as a
  -- JSON string; bytes as base64 (no line breaks) in quotes. A NULL payload keeps its
  -- schema in the event router's record, so JsonConverter writes null; only the
  -- router's own tombstone (tombstone on empty, schema and value null) stays one.
  IF value_json THEN
    IF payload IS NOT NULL THEN
      bytes := convert_to(:"schema".outbox_debezium_json_string(payload::text), 'UTF8');
    ELSIF payload_kind = 'bytea' AND bytes IS NOT NULL THEN
      bytes := convert_to('"' || translate(encode(bytes, 'base64'), E'\n', '') || '"', 'UTF8');
    ELSIF payload_kind <> 'bytea' AND payload_text IS NOT NULL THEN
      bytes := convert_to(:"schema".outbox_debezium_json_string(payload_text), 'UTF8');
    ELSIF payload_null AND NOT tombstone_on_empty THEN
      bytes := convert_to('null', 'UTF8');
    ELSE
      bytes := NULL;
    END IF;
    payload := NULL;
  END IF;

  -- The key as text (StringConverter), or as JsonConverter writes the column: a string
  -- through the Jackson encoder, a number or boolean as it is, NULL as null (a key of
  -- four bytes, not a null key).
  IF key_json THEN
    key := CASE jsonb_typeof(r -> key_column)
      WHEN 'string' THEN :"schema".outbox_debezium_json_string(r ->> key_column)
      WHEN 'null' THEN 'null'
      ELSE (r -> key_column)::text
    END;
  ELSE
    key := r ->> key_column;
  END IF;

  IF ts_kind = 'utc' THEN
    created := coalesce((r ->> ts_column)::timestamp AT TIME ZONE 'UTC', now());
  ELSIF ts_kind = 'tz' THEN
    created := coalesce((r ->> ts_column)::timestamptz, now());
  END IF;

  -- Headers: `id`, then the placed columns; NULLs are left out (outbox headers are
  -- strings). A JSON value is announced as such, as the relay announces a jsonb payload.
  headers := jsonb_build_object('id', r ->> id_column);
  IF bytes IS NOT NULL AND (value_json OR payload_kind = 'json') THEN
    headers := headers || jsonb_build_object('content-type', 'application/json');
  END IF;
  i := 12;
  WHILE i < TG_NARGS LOOP
    headers := headers || jsonb_build_object(TG_ARGV[i + 1], r ->> TG_ARGV[i]);
    i := i + 2;
  END LOOP;

  INSERT INTO :"schema".outbox (message_id, topic, key, payload, payload_bytes, headers, created_at)
  VALUES (coalesce(message_id, gen_random_uuid()), topic, coalesce(key, ''), payload, bytes,
          jsonb_strip_nulls(headers), created);
  RETURN NULL;
END
$$;
