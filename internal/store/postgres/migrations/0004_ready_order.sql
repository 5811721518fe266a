-- Claiming ready entities orders by (not_before, flow, entity) in byte order
-- and stops at its limit. The first index covered not_before alone, so every
-- claim read and sorted the whole backlog of pending entities. The index now
-- holds the claim's whole order, with the same "C" collation the claim
-- sorts by, so a claim reads its limit plus the rows it skips.
DROP INDEX entities_ready;
CREATE INDEX entities_ready ON entities (not_before, flow COLLATE "C", entity COLLATE "C") WHERE pending > 0;
