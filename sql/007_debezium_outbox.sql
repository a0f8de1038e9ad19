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
-- (fixed text, checked by `attach`):
--   0 route-by column, 1 topic pattern (`${routedByValue}` replaced by that column's
--   value), 2 key column, 3 event id column, 4 payload column, 5 timestamp column or '',
--   6 tombstone on empty payload ('true'/'false'), then pairs of (column, header name).
--
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
  payload_column text := TG_ARGV[4];
  ts_column      text := TG_ARGV[5];
  tombstone_on_empty boolean := TG_ARGV[6] = 'true';
  payload_type text;
  id_type      text;
  ts_type      text;
  topic_sql    text;
  message_sql  text;
  payload_sql  text := 'NULL';
  bytes_sql    text := 'NULL';
  created_sql  text := 'now()';
  headers_sql  text;
  value_sql    text;
  i integer;
BEGIN
  IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' OR TG_OP <> 'INSERT' OR TG_NARGS < 7 OR TG_NARGS % 2 = 0 THEN
    RAISE EXCEPTION 'outbox_debezium_capture must run AFTER INSERT FOR EACH ROW with 7 + 2n arguments; attach it with `outbox-relay debezium attach`';
  END IF;

  -- The column types decide how the payload and the event id are copied. Read per row
  -- (a cached plan, a few catalog lookups) rather than frozen into the arguments, so
  -- that the script `outbox-relay debezium print` writes needs no database, and a
  -- column whose type changes later is still copied by its new type.
  SELECT max(t) FILTER (WHERE attname = payload_column),
         max(t) FILTER (WHERE attname = id_column),
         max(t) FILTER (WHERE attname = ts_column)
    INTO payload_type, id_type, ts_type
    FROM (SELECT a.attname, format_type(CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE ty.oid END, NULL) AS t
            FROM pg_attribute AS a JOIN pg_type AS ty ON ty.oid = a.atttypid
           WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND NOT a.attisdropped
             AND a.attname IN (payload_column, id_column, ts_column)) AS cols;

  -- Topic: the pattern with the route-by value put in. A NULL value leaves the
  -- placeholder in, a name Kafka refuses: the relay dead-letters that row alone, with
  -- the pattern in its reason (the event router would fail the connector instead).
  IF position('${routedByValue}' IN topic_pattern) > 0 THEN
    topic_sql := format('coalesce(replace(%L, %L, ($1).%I::text), %L)', topic_pattern, '${routedByValue}', route_column, topic_pattern);
  ELSE
    topic_sql := quote_literal(topic_pattern);
  END IF;

  -- message-id: the event id itself when it is a uuid. Otherwise a uuid derived from the
  -- table and the id, so the same event always gets the same message-id (consumers
  -- deduplicate on it) and ids of two tables do not collide.
  IF id_type = 'uuid' THEN
    message_sql := format('coalesce(($1).%I, gen_random_uuid())', id_column);
  ELSE
    message_sql := format('coalesce(md5(%L || ($1).%I::text)::uuid, gen_random_uuid())',
                          TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ':', id_column);
  END IF;

  -- Payload, byte for byte what the event router sends with the String converter
  -- (text, json, jsonb) or the ByteArray/BinaryData converter (bytea). jsonb goes to the
  -- payload column: the relay sends its text, which is what logical decoding hands
  -- Debezium. json keeps its original text, so it goes to payload_bytes (jsonb would
  -- reorder keys and whitespace, and refuse some texts json accepts), with the
  -- content-type header the relay gives JSON payloads. NULL is a tombstone, as in the
  -- event router; an empty or blank text is one only with tombstone-on-empty (Java's
  -- trim(): characters up to U+0020).
  IF payload_type = 'jsonb' THEN
    payload_sql := format('($1).%I', payload_column);
  ELSIF payload_type = 'bytea' THEN
    bytes_sql := format('($1).%I', payload_column);
  ELSE
    value_sql := format('($1).%I::text', payload_column);
    IF tombstone_on_empty THEN
      bytes_sql := format('CASE WHEN %s ~ %L THEN NULL ELSE convert_to(%s, ''UTF8'') END', value_sql, '^[\x01-\x20]*$', value_sql);
    ELSE
      bytes_sql := format('convert_to(%s, ''UTF8'')', value_sql);
    END IF;
  END IF;

  -- Kafka timestamp from a column, as table.field.event.timestamp: a timestamp without
  -- time zone is read as UTC (Debezium's MicroTimestamp); NULL or no column: now().
  IF ts_column <> '' THEN
    IF ts_type = 'timestamp without time zone' THEN
      created_sql := format('coalesce(($1).%I AT TIME ZONE ''UTC'', now())', ts_column);
    ELSIF ts_type = 'timestamp with time zone' THEN
      created_sql := format('coalesce(($1).%I, now())', ts_column);
    ELSE
      RAISE EXCEPTION 'outbox_debezium_capture: timestamp column % of %.% is %, not a timestamp', ts_column, TG_TABLE_SCHEMA, TG_TABLE_NAME, coalesce(ts_type, 'missing');
    END IF;
  END IF;

  -- Headers: `id` (the event id, as table.field.event.id puts it), then the placed
  -- columns in their text form. NULLs are left out: outbox headers are strings.
  headers_sql := format('''id'', ($1).%I::text', id_column);
  IF payload_type = 'json' THEN
    headers_sql := headers_sql || format(', ''content-type'', CASE WHEN ($1).%I IS NULL THEN NULL ELSE ''application/json'' END', payload_column);
  END IF;
  i := 7;
  WHILE i < TG_NARGS LOOP
    headers_sql := headers_sql || format(', %L, ($1).%I::text', TG_ARGV[i + 1], TG_ARGV[i]);
    i := i + 2;
  END LOOP;

  -- A NULL key becomes '', which the relay dead-letters (validation:empty_key): every
  -- outbox row has a key, where the event router would send a null one.
  EXECUTE format(
    'INSERT INTO :"schema".outbox (message_id, topic, key, payload, payload_bytes, headers, created_at) '
    'SELECT %s, %s, coalesce(($1).%I::text, ''''), %s, %s, jsonb_strip_nulls(jsonb_build_object(%s)), %s',
    message_sql, topic_sql, key_column, payload_sql, bytes_sql, headers_sql, created_sql)
  USING NEW;
  RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION :"schema".outbox_debezium_capture() FROM PUBLIC;
