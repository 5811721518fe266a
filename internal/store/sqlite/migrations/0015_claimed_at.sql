-- When an entity and an effect were last claimed (unix microseconds, 0
-- never): with the times every stage already records (received, routed,
-- settled, called), they split an event's way through the pipeline into
-- the time it waited for each stage and the time each stage worked on it
-- (hookledger-bench e2e prints both). Written by the claim's own update.
ALTER TABLE entities ADD COLUMN claimed_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN claimed_at INTEGER NOT NULL DEFAULT 0;
