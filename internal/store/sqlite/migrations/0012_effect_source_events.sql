-- Every event that asked for an effect, not only the one that made it:
-- the later ones, oldest first, as a JSON array of event pks (the source
-- event stays source_event_pk). Appended when an event asks for an
-- effect whose episode key exists already (a replay, a duplicate with a
-- new id, another flow's route).
ALTER TABLE effects ADD COLUMN later_event_pks TEXT NOT NULL DEFAULT '[]';
