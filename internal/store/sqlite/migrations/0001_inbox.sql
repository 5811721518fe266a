-- Times are INTEGER unix microseconds in UTC: they sort, compare and round
-- the same way as PostgreSQL's timestamptz.

CREATE TABLE events (
    pk          INTEGER PRIMARY KEY,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    entity      TEXT    NOT NULL,
    account     TEXT    NOT NULL,
    occurred_at INTEGER,                 -- NULL when the sender gives none
    received_at INTEGER NOT NULL,        -- first receipt
    deliveries  INTEGER NOT NULL,
    disposition TEXT    NOT NULL DEFAULT 'accepted' CHECK (disposition IN
        ('accepted', 'applied', 'duplicate', 'stale', 'superseded',
         'unrouted', 'dead_lettered', 'resolved')),
    CHECK (source <> '' AND event_id <> ''),
    UNIQUE (source, event_id)
) STRICT;

-- Pending work is found through this partial index, so it stays small.
CREATE INDEX events_accepted ON events (pk) WHERE disposition = 'accepted';

CREATE TABLE deliveries (
    id          INTEGER PRIMARY KEY,
    event_pk    INTEGER NOT NULL REFERENCES events (pk),
    request_id  TEXT    NOT NULL,
    batch_index INTEGER NOT NULL,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    entity      TEXT    NOT NULL,
    account     TEXT    NOT NULL,
    occurred_at INTEGER,
    received_at INTEGER NOT NULL,
    headers     TEXT    NOT NULL,        -- JSON object of kept headers
    body        BLOB    NOT NULL
) STRICT;

CREATE INDEX deliveries_event ON deliveries (event_pk);
CREATE INDEX deliveries_source_event ON deliveries (source, event_id);

CREATE TABLE audit (
    id       INTEGER PRIMARY KEY,
    at       INTEGER NOT NULL,
    actor    TEXT    NOT NULL,
    action   TEXT    NOT NULL,
    source   TEXT    NOT NULL,
    event_id TEXT    NOT NULL,
    entity   TEXT    NOT NULL,
    detail   TEXT    NOT NULL
) STRICT;

CREATE INDEX audit_action ON audit (action, id);
