CREATE TABLE events (
    pk          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    type        text        NOT NULL,
    entity      text        NOT NULL,
    account     text        NOT NULL,
    occurred_at timestamptz,             -- NULL when the sender gives none
    received_at timestamptz NOT NULL,    -- first receipt
    deliveries  integer     NOT NULL,
    disposition text        NOT NULL DEFAULT 'accepted' CHECK (disposition IN
        ('accepted', 'applied', 'duplicate', 'stale', 'superseded',
         'unrouted', 'dead_lettered', 'resolved')),
    CHECK (source <> '' AND event_id <> ''),
    UNIQUE (source, event_id)
);

-- Pending work is found through this partial index, so it stays small.
CREATE INDEX events_accepted ON events (pk) WHERE disposition = 'accepted';

CREATE TABLE deliveries (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_pk    bigint      NOT NULL REFERENCES events (pk),
    request_id  text        NOT NULL,
    batch_index integer     NOT NULL,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    type        text        NOT NULL,
    entity      text        NOT NULL,
    account     text        NOT NULL,
    occurred_at timestamptz,
    received_at timestamptz NOT NULL,
    headers     jsonb       NOT NULL,
    body        bytea       NOT NULL
);

CREATE INDEX deliveries_event ON deliveries (event_pk);
CREATE INDEX deliveries_source_event ON deliveries (source, event_id);

CREATE TABLE audit (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    actor    text        NOT NULL,
    action   text        NOT NULL,
    source   text        NOT NULL,
    event_id text        NOT NULL,
    entity   text        NOT NULL,
    detail   text        NOT NULL
);

CREATE INDEX audit_action ON audit (action, id);
