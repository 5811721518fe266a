-- Ordered processing: routing, per-entity work, projections with leases,
-- the effect ledger, the feedback-loop guard and replays.

ALTER TABLE events ADD COLUMN causation_id TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN hop INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN routed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN causation_id TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN hop INTEGER NOT NULL DEFAULT 0;

CREATE INDEX events_unrouted ON events (pk) WHERE routed = 0;

-- One row per (flow, entity): the projection (newest applied version and
-- state) and the lease that serialises its processing (OR02).
CREATE TABLE entities (
    flow             TEXT    NOT NULL,
    entity           TEXT    NOT NULL,
    version          TEXT    NOT NULL DEFAULT '',
    version_sort     TEXT    NOT NULL DEFAULT '',
    state            TEXT    NOT NULL DEFAULT 'null',
    applied_event_pk INTEGER,
    updated_at       INTEGER NOT NULL,
    pending          INTEGER NOT NULL DEFAULT 0,
    lease_token      TEXT    NOT NULL DEFAULT '',
    lease_until      INTEGER NOT NULL DEFAULT 0,
    not_before       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (flow, entity)
) STRICT;

CREATE INDEX entities_ready ON entities (not_before) WHERE pending > 0;

-- One row per (event, flow, pass): the unit of ordered processing.
CREATE TABLE work (
    id          INTEGER PRIMARY KEY,
    flow        TEXT    NOT NULL,
    entity      TEXT    NOT NULL,
    event_pk    INTEGER NOT NULL REFERENCES events (pk),
    replay_id   INTEGER NOT NULL DEFAULT 0,
    order_key   TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    done_at     INTEGER,
    disposition TEXT    NOT NULL DEFAULT '',
    reason      TEXT    NOT NULL DEFAULT '',
    UNIQUE (flow, event_pk, replay_id)
) STRICT;

CREATE INDEX work_pending ON work (flow, entity, order_key, id) WHERE done_at IS NULL;
CREATE INDEX work_event ON work (event_pk);

-- The effect ledger: one row per business effect, unique on its episode key
-- (IP05), whatever delivery or replay caused it.
CREATE TABLE effects (
    id              INTEGER PRIMARY KEY,
    episode_key     TEXT    NOT NULL UNIQUE,
    flow            TEXT    NOT NULL,
    entity          TEXT    NOT NULL,
    version         TEXT    NOT NULL,
    version_sort    TEXT    NOT NULL,
    effect          TEXT    NOT NULL,
    destination     TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN
        ('approved', 'submitting', 'acknowledged', 'done', 'needs_reconciliation',
         'retry_wait', 'superseded', 'dead', 'resolved')),
    request         TEXT    NOT NULL,
    source_event_pk INTEGER NOT NULL REFERENCES events (pk),
    causation_id    TEXT    NOT NULL,
    hop             INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX effects_entity ON effects (flow, entity, effect, state);
CREATE INDEX effects_state ON effects (state, next_attempt_at);

-- The first visit of a causation to a flow; a second visit is a loop.
CREATE TABLE loop_visits (
    flow         TEXT    NOT NULL,
    causation_id TEXT    NOT NULL,
    event_pk     INTEGER NOT NULL,
    at           INTEGER NOT NULL,
    PRIMARY KEY (flow, causation_id)
) STRICT;

CREATE TABLE replays (
    id         INTEGER PRIMARY KEY,
    created_at INTEGER NOT NULL,
    actor      TEXT    NOT NULL,
    selection  TEXT    NOT NULL,
    items      INTEGER NOT NULL
) STRICT;
