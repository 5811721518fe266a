-- Effect tombstones (docs/retention.md): retention deletes a finished
-- effect past its source's retention and keeps here what stops its episode
-- key from running again. The ledger's inserts consult this table: a key
-- held here behaves as an existing effect, with the stored request for the
-- key-conflict comparison. Tombstones are never deleted.
CREATE TABLE effect_tombstones (
    episode_key text        PRIMARY KEY,
    flow        text        NOT NULL,
    entity      text        NOT NULL,
    effect      text        NOT NULL,
    destination text        NOT NULL,
    state       text        NOT NULL,
    request     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    deleted_at  timestamptz NOT NULL
);

-- Pruning keeps the original of a compensation that is not finished: one
-- probe per examined effect. Compensations are rare, so the partial index
-- costs ordinary effects nothing.
CREATE INDEX effects_compensates ON effects (compensates) WHERE compensates <> 0;
