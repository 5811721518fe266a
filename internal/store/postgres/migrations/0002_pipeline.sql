-- Ordered processing: routing, per-entity work, projections with leases,
-- the effect ledger, the feedback-loop guard and replays.

ALTER TABLE events ADD COLUMN causation_id text NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN hop integer NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN routed boolean NOT NULL DEFAULT false;
ALTER TABLE deliveries ADD COLUMN causation_id text NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN hop integer NOT NULL DEFAULT 0;

CREATE INDEX events_unrouted ON events (pk) WHERE NOT routed;

-- One row per (flow, entity): the projection (newest applied version and
-- state) and the lease that serialises its processing (OR02).
CREATE TABLE entities (
    flow             text    NOT NULL,
    entity           text    NOT NULL,
    version          text    NOT NULL DEFAULT '',
    version_sort     text    COLLATE "C" NOT NULL DEFAULT '',
    state            jsonb   NOT NULL DEFAULT 'null',
    applied_event_pk bigint,
    updated_at       timestamptz NOT NULL,
    pending          bigint NOT NULL DEFAULT 0,
    lease_token      text    NOT NULL DEFAULT '',
    lease_until      timestamptz NOT NULL DEFAULT '-infinity',
    not_before       timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (flow, entity)
);

CREATE INDEX entities_ready ON entities (not_before) WHERE pending > 0;

-- One row per (event, flow, pass): the unit of ordered processing.
CREATE TABLE work (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    flow        text    NOT NULL,
    entity      text    NOT NULL,
    event_pk    bigint NOT NULL REFERENCES events (pk),
    replay_id   bigint NOT NULL DEFAULT 0,
    order_key   text    COLLATE "C" NOT NULL,
    created_at  timestamptz NOT NULL,
    done_at     timestamptz,
    disposition text    NOT NULL DEFAULT '',
    reason      text    NOT NULL DEFAULT '',
    UNIQUE (flow, event_pk, replay_id)
);

CREATE INDEX work_pending ON work (flow, entity, order_key, id) WHERE done_at IS NULL;
CREATE INDEX work_event ON work (event_pk);

-- The effect ledger: one row per business effect, unique on its episode key
-- (IP05), whatever delivery or replay caused it.
CREATE TABLE effects (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    episode_key     text    NOT NULL UNIQUE,
    flow            text    NOT NULL,
    entity          text    NOT NULL,
    version         text    NOT NULL,
    version_sort    text    COLLATE "C" NOT NULL,
    effect          text    NOT NULL,
    destination     text    NOT NULL,
    state           text    NOT NULL CHECK (state IN
        ('approved', 'submitting', 'acknowledged', 'done', 'needs_reconciliation',
         'retry_wait', 'superseded', 'dead', 'resolved')),
    request         jsonb   NOT NULL,
    source_event_pk bigint NOT NULL REFERENCES events (pk),
    causation_id    text    NOT NULL,
    hop             bigint NOT NULL,
    attempts        bigint NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE INDEX effects_entity ON effects (flow, entity, effect, state);
CREATE INDEX effects_state ON effects (state, next_attempt_at);

-- The first visit of a causation to a flow; a second visit is a loop.
CREATE TABLE loop_visits (
    flow         text    NOT NULL,
    causation_id text    NOT NULL,
    event_pk     bigint NOT NULL,
    at           timestamptz NOT NULL,
    PRIMARY KEY (flow, causation_id)
);

CREATE TABLE replays (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL,
    actor      text    NOT NULL,
    selection  text    NOT NULL,
    items      bigint NOT NULL
);
