-- A key of any length can be dead-lettered.
--
-- Keys are text without a length limit (Kafka takes keys up to the message size), but a
-- btree entry holds at most about 2.7 kB: a dead letter with a longer key failed to
-- insert into the (topic, key, id) index, its batch rolled back and was retried for ever.
-- The index now holds a hash of the key; lookups by key compare md5(key) first and the
-- key itself after. Such a key is also never parked (outbox_parked_keys' primary key has
-- the same limit): the relay dead-letters it under the skip policy (src/relay/publishBatch.ts).
DROP INDEX :"schema".outbox_dead_letters_topic_key_idx;
CREATE INDEX outbox_dead_letters_topic_key_idx ON :"schema".outbox_dead_letters (topic, md5(key), id);
