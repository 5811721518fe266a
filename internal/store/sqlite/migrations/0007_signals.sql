-- Outcome signals, business deadlines, compensation and verification.
--
-- revision_lag compares, per (flow, entity), the newest order key routed to
-- the entity (whatever became of its event) with the newest order key that
-- left the projection caught up (applied, or a duplicate, stale or
-- superseded version of what is applied). A dead-lettered newest event
-- leaves the entity behind, which is the point. Both keys are maintained
-- by routing and by FlowApply, so counting lagging entities reads a partial
-- index of the entities that lag, never the work table.
ALTER TABLE entities ADD COLUMN newest_key TEXT NOT NULL DEFAULT '';
ALTER TABLE entities ADD COLUMN settled_key TEXT NOT NULL DEFAULT '';
-- When the entity last fell behind (0 when it never did).
ALTER TABLE entities ADD COLUMN behind_since INTEGER NOT NULL DEFAULT 0;

UPDATE entities SET
    newest_key = COALESCE((SELECT max(w.order_key) FROM work w
        WHERE w.entity = entities.entity AND w.flow = entities.flow), ''),
    settled_key = COALESCE((SELECT max(w.order_key) FROM work w
        WHERE w.entity = entities.entity AND w.flow = entities.flow
          AND w.disposition IN ('applied', 'duplicate', 'stale', 'superseded', 'resolved')), ''),
    behind_since = updated_at;

CREATE INDEX entities_behind ON entities (behind_since) WHERE newest_key > settled_key;

-- The version a work item applied, so that hookledger check can compare a
-- projection with the newest version applied to it.
ALTER TABLE work ADD COLUMN version_sort TEXT NOT NULL DEFAULT '';

-- Compensation: the id of the effect this one undoes (0 for an ordinary
-- effect). Business deadlines: when the effect is due by, when
-- deadline_risk starts to warn, what to do once it passes ('' keeps
-- trying, 'dead' hands it to a person) and when it was escalated.
-- Verification: when the destination was found not to have a done effect.
ALTER TABLE effects ADD COLUMN compensates INTEGER NOT NULL DEFAULT 0;
ALTER TABLE effects ADD COLUMN deadline_at INTEGER;
ALTER TABLE effects ADD COLUMN deadline_warn_at INTEGER;
ALTER TABLE effects ADD COLUMN on_deadline TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN deadline_missed_at INTEGER;
ALTER TABLE effects ADD COLUMN mismatch_at INTEGER;

CREATE INDEX effects_deadline ON effects (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('approved', 'submitting', 'acknowledged', 'retry_wait', 'needs_reconciliation');
CREATE INDEX effects_deadline_missed ON effects (id) WHERE deadline_missed_at IS NOT NULL;
CREATE INDEX effects_compensation ON effects (state, created_at) WHERE compensates <> 0;
CREATE INDEX effects_mismatch ON effects (mismatch_at) WHERE mismatch_at IS NOT NULL;

-- Per-minute (24 h) and hourly (30 days) rollups of every signal, so that
-- trends can be drawn without Prometheus. value is the highest value seen
-- in the bucket, status the worst.
CREATE TABLE signal_history (
    name       TEXT    NOT NULL,
    resolution TEXT    NOT NULL CHECK (resolution IN ('minute', 'hour')),
    bucket     INTEGER NOT NULL,
    value      INTEGER NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('ok', 'warn', 'alert')),
    PRIMARY KEY (name, resolution, bucket)
) STRICT;

-- How far continuous verification has read each destination's effects.
CREATE TABLE verify_cursors (
    destination TEXT    PRIMARY KEY,
    after_id    INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- revision_lag's largest gap counts, for each lagging entity, its work
-- ahead of the settled key: pending items through work_pending, dead
-- letters through this index. It holds dead letters only, so routing and
-- settling everything else pay for nothing but its predicate.
CREATE INDEX work_dead ON work (flow, entity, order_key, event_pk) WHERE disposition = 'dead_lettered';
