-- When an entity and an effect were last claimed (-infinity never): with
-- the times every stage already records (received, routed, settled,
-- called), they split an event's way through the pipeline into the time
-- it waited for each stage and the time each stage worked on it
-- (hookledger-bench e2e prints both). Written by the claim's own update;
-- no index reads them, so the claims' updates stay in place (HOT). A
-- constant default adds the columns without rewriting the tables.
ALTER TABLE entities ADD COLUMN claimed_at timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE effects ADD COLUMN claimed_at timestamptz NOT NULL DEFAULT '-infinity';
