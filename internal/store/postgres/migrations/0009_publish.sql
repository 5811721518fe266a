-- Publishing (docs/publishing.md): the Standard Webhooks endpoints messages
-- are published to, and the idempotency keys of the messages. A message
-- itself is an event of source 'publish' with one delivery row, and each
-- endpoint it goes to is an effect: the shared tables hold them.

-- spec is the endpoint's configuration as one JSON document
-- (store.MarshalSpec), so a field added to it needs no migration. A deleted
-- endpoint keeps its row: its effects stay in the ledger and name it.
CREATE TABLE endpoints (
    id              text        COLLATE "C" PRIMARY KEY,
    origin          text        NOT NULL,
    spec            jsonb       NOT NULL,
    enabled         boolean     NOT NULL,
    disabled_reason text        NOT NULL DEFAULT '',
    disabled_at     timestamptz,         -- NULL while enabled
    failing_since   timestamptz,         -- NULL after a success
    deleted         boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

-- One row per held Idempotency-Key: the message it made and the
-- fingerprint of the request that made it, until expires_at. Pruning
-- walks the expiry index.
CREATE TABLE idempotency_keys (
    key         text        PRIMARY KEY,
    fingerprint text        NOT NULL,
    message_id  text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
