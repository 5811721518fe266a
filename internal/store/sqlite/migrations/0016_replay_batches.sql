-- A replay enqueues its work in batches, one transaction each, so that
-- its memory does not grow with the events it selects. planned is 0 until
-- its last batch is in (a replay interrupted before has planned = 0 and
-- items = the work enqueued so far); rows from before are complete.
-- effect_floor is the largest effect id when it began: the effects its
-- work creates come after it. The partial index counts a replay's work
-- by disposition without touching the first passes' rows.
ALTER TABLE replays ADD COLUMN planned INTEGER NOT NULL DEFAULT 1;
ALTER TABLE replays ADD COLUMN effect_floor INTEGER NOT NULL DEFAULT 0;
CREATE INDEX work_replay ON work (replay_id, disposition) WHERE replay_id <> 0;
