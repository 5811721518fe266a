-- Attempts are numbered across an effect's whole life: calls counts its
-- attempts rows (numbered 1 to calls), while attempts, which an
-- operator's retry and a re-drive restart, stays the retry policy's
-- count. restart says what restarted it since the last call, and the
-- next call's row keeps it. Existing effects continue from the rows they
-- have.
ALTER TABLE effects ADD COLUMN calls integer NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN restart text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE effect_attempts ADD COLUMN restart text COLLATE "C" NOT NULL DEFAULT '';
UPDATE effects f SET calls = a.n
FROM (SELECT effect_id, count(*) AS n FROM effect_attempts GROUP BY effect_id) a WHERE f.id = a.effect_id;
