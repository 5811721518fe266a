-- The delivery worker claims per destination; with one index for all
-- destinations a claim walked every effect the destination ever had (done
-- ones included) and sorted them. This one holds only claimable effects,
-- per destination in due order.
CREATE INDEX effects_due_destination ON effects (destination, next_attempt_at, id)
    WHERE state IN ('approved', 'retry_wait', 'dead', 'submitting', 'needs_reconciliation');
