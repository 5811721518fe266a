-- Publishing (docs/publishing.md): the Standard Webhooks endpoints messages
-- are published to, and the idempotency keys of the messages. A message
-- itself is an event of source 'publish' with one delivery row, and each
-- endpoint it goes to is an effect: the shared tables hold them.

-- spec is the endpoint's configuration as one JSON document
-- (store.MarshalSpec), so a field added to it needs no migration. A deleted
-- endpoint keeps its row: its effects stay in the ledger and name it.
CREATE TABLE endpoints (
    id              TEXT    PRIMARY KEY,
    origin          TEXT    NOT NULL,
    spec            TEXT    NOT NULL,
    enabled         INTEGER NOT NULL,
    disabled_reason TEXT    NOT NULL DEFAULT '',
    disabled_at     INTEGER,             -- NULL while enabled
    failing_since   INTEGER,             -- NULL after a success
    deleted         INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;

-- One row per held Idempotency-Key: the message it made and the
-- fingerprint of the request that made it, until expires_at. Pruning
-- walks the expiry index.
CREATE TABLE idempotency_keys (
    key         TEXT    PRIMARY KEY,
    fingerprint TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
