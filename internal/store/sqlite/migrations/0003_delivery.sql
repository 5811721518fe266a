-- Effect delivery: leases on effects being called, the evidence of every
-- call, and the exception queue's fields.

ALTER TABLE effects ADD COLUMN lease_token TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN redrives INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN error_class TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN suggested_repair TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN destination_ref TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN last_response TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN note TEXT NOT NULL DEFAULT '';

-- Due work: approved effects, retries and re-drives by due time, and
-- submitting effects by lease expiry.
CREATE INDEX effects_due ON effects (state, next_attempt_at, id)
    WHERE state IN ('approved', 'retry_wait', 'dead', 'submitting', 'needs_reconciliation');

CREATE TABLE effect_attempts (
    id               INTEGER PRIMARY KEY,
    effect_id        INTEGER NOT NULL REFERENCES effects (id),
    number           INTEGER NOT NULL,
    started_at       INTEGER NOT NULL,
    duration_us      INTEGER NOT NULL,
    status           INTEGER NOT NULL,
    class            TEXT    NOT NULL,
    error            TEXT    NOT NULL,
    response         TEXT    NOT NULL,
    retry_after      TEXT    NOT NULL,
    retry_after_unit TEXT    NOT NULL,
    wait_us          INTEGER NOT NULL,
    reconcile        INTEGER NOT NULL
) STRICT;

CREATE INDEX effect_attempts_effect ON effect_attempts (effect_id, id);
