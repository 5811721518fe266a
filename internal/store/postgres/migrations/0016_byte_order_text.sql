-- Every text column compares in byte order (COLLATE "C"), whatever the
-- database's locale. Two reasons:
--
-- * Speed. Keys are compared in every index the data path writes: sources,
--   event ids, flows, entities, effect names, states, audit actions. Under
--   a libc locale (en_US.UTF-8, even C.UTF-8) each comparison copies both
--   strings and calls strcoll; in byte order it is one memcmp. In the
--   pipeline benchmark this was a tenth of the database's processor time.
-- * Agreement. SQLite compares text in byte order; lists, claims and
--   order keys now sort the same on both drivers, where before only the
--   columns that said COLLATE "C" did.
--
-- PostgreSQL changes a column's collation without rewriting the table,
-- but rebuilds each index on the column, holding the table's lock while it
-- does: docs/deploy.md ("Upgrading") gives the time it takes.
ALTER TABLE events
	ALTER COLUMN source TYPE text COLLATE "C",
	ALTER COLUMN event_id TYPE text COLLATE "C",
	ALTER COLUMN type TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN account TYPE text COLLATE "C",
	ALTER COLUMN disposition TYPE text COLLATE "C",
	ALTER COLUMN causation_id TYPE text COLLATE "C";
ALTER TABLE deliveries
	ALTER COLUMN request_id TYPE text COLLATE "C",
	ALTER COLUMN source TYPE text COLLATE "C",
	ALTER COLUMN event_id TYPE text COLLATE "C",
	ALTER COLUMN type TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN account TYPE text COLLATE "C",
	ALTER COLUMN causation_id TYPE text COLLATE "C";
ALTER TABLE audit
	ALTER COLUMN actor TYPE text COLLATE "C",
	ALTER COLUMN action TYPE text COLLATE "C",
	ALTER COLUMN source TYPE text COLLATE "C",
	ALTER COLUMN event_id TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN detail TYPE text COLLATE "C";
ALTER TABLE entities
	ALTER COLUMN flow TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN version TYPE text COLLATE "C",
	ALTER COLUMN lease_token TYPE text COLLATE "C";
ALTER TABLE work
	ALTER COLUMN flow TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN disposition TYPE text COLLATE "C",
	ALTER COLUMN reason TYPE text COLLATE "C";
ALTER TABLE effects
	ALTER COLUMN episode_key TYPE text COLLATE "C",
	ALTER COLUMN flow TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN version TYPE text COLLATE "C",
	ALTER COLUMN effect TYPE text COLLATE "C",
	ALTER COLUMN destination TYPE text COLLATE "C",
	ALTER COLUMN state TYPE text COLLATE "C",
	ALTER COLUMN causation_id TYPE text COLLATE "C",
	ALTER COLUMN lease_token TYPE text COLLATE "C",
	ALTER COLUMN error_class TYPE text COLLATE "C",
	ALTER COLUMN reason TYPE text COLLATE "C",
	ALTER COLUMN suggested_repair TYPE text COLLATE "C",
	ALTER COLUMN destination_ref TYPE text COLLATE "C",
	ALTER COLUMN last_response TYPE text COLLATE "C",
	ALTER COLUMN owner TYPE text COLLATE "C",
	ALTER COLUMN note TYPE text COLLATE "C",
	ALTER COLUMN on_deadline TYPE text COLLATE "C";
ALTER TABLE effect_attempts
	ALTER COLUMN class TYPE text COLLATE "C",
	ALTER COLUMN error TYPE text COLLATE "C",
	ALTER COLUMN response TYPE text COLLATE "C",
	ALTER COLUMN retry_after TYPE text COLLATE "C",
	ALTER COLUMN retry_after_unit TYPE text COLLATE "C";
ALTER TABLE effect_tombstones
	ALTER COLUMN episode_key TYPE text COLLATE "C",
	ALTER COLUMN flow TYPE text COLLATE "C",
	ALTER COLUMN entity TYPE text COLLATE "C",
	ALTER COLUMN effect TYPE text COLLATE "C",
	ALTER COLUMN destination TYPE text COLLATE "C",
	ALTER COLUMN state TYPE text COLLATE "C";
ALTER TABLE loop_visits
	ALTER COLUMN flow TYPE text COLLATE "C",
	ALTER COLUMN causation_id TYPE text COLLATE "C";
ALTER TABLE replays
	ALTER COLUMN actor TYPE text COLLATE "C",
	ALTER COLUMN selection TYPE text COLLATE "C";
ALTER TABLE signal_history
	ALTER COLUMN name TYPE text COLLATE "C",
	ALTER COLUMN resolution TYPE text COLLATE "C",
	ALTER COLUMN status TYPE text COLLATE "C";
ALTER TABLE verify_cursors
	ALTER COLUMN destination TYPE text COLLATE "C";
ALTER TABLE endpoints
	ALTER COLUMN origin TYPE text COLLATE "C",
	ALTER COLUMN disabled_reason TYPE text COLLATE "C";
ALTER TABLE idempotency_keys
	ALTER COLUMN key TYPE text COLLATE "C",
	ALTER COLUMN fingerprint TYPE text COLLATE "C",
	ALTER COLUMN message_id TYPE text COLLATE "C";
