-- Attempts are numbered across an effect's whole life: calls counts its
-- attempts rows (numbered 1 to calls), while attempts, which an
-- operator's retry and a re-drive restart, stays the retry policy's
-- count. restart says what restarted it since the last call, and the
-- next call's row keeps it. Existing effects continue from the rows they
-- have.
ALTER TABLE effects ADD COLUMN calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN restart TEXT NOT NULL DEFAULT '';
ALTER TABLE effect_attempts ADD COLUMN restart TEXT NOT NULL DEFAULT '';
UPDATE effects SET calls = (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = effects.id)
WHERE id IN (SELECT effect_id FROM effect_attempts);
