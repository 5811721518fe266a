-- Effect tombstones (docs/retention.md): retention deletes a finished
-- effect past its source's retention and keeps here what stops its episode
-- key from running again. The ledger's inserts consult this table: a key
-- held here behaves as an existing effect, with the stored request for the
-- key-conflict comparison. Tombstones are never deleted.
CREATE TABLE effect_tombstones (
    episode_key TEXT    PRIMARY KEY,
    flow        TEXT    NOT NULL,
    entity      TEXT    NOT NULL,
    effect      TEXT    NOT NULL,
    destination TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    request     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    deleted_at  INTEGER NOT NULL
) STRICT;

-- Pruning keeps the original of a compensation that is not finished: one
-- probe per examined effect. Compensations are rare, so the partial index
-- costs ordinary effects nothing.
CREATE INDEX effects_compensates ON effects (compensates) WHERE compensates <> 0;
