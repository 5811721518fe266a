-- Effect delivery: leases on effects being called, the evidence of every
-- call, and the exception queue's fields.

ALTER TABLE effects ADD COLUMN lease_token text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN lease_until timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE effects ADD COLUMN redrives integer NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN error_class text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN reason text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN suggested_repair text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN destination_ref text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN last_response text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN owner text NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN note text NOT NULL DEFAULT '';

-- Due work: approved effects, retries and re-drives by due time, and
-- submitting effects by lease expiry.
CREATE INDEX effects_due ON effects (state, next_attempt_at, id)
    WHERE state IN ('approved', 'retry_wait', 'dead', 'submitting', 'needs_reconciliation');

CREATE TABLE effect_attempts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    effect_id        bigint      NOT NULL REFERENCES effects (id),
    number           integer     NOT NULL,
    started_at       timestamptz NOT NULL,
    duration_us      bigint      NOT NULL,
    status           integer     NOT NULL,
    class            text        NOT NULL,
    error            text        NOT NULL,
    response         text        NOT NULL,
    retry_after      text        NOT NULL,
    retry_after_unit text        NOT NULL,
    wait_us          bigint      NOT NULL,
    reconcile        boolean     NOT NULL
);

CREATE INDEX effect_attempts_effect ON effect_attempts (effect_id, id);
