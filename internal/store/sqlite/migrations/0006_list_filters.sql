-- The operators' lists (the admin API, hookledger effects) page in id order
-- with keyset cursors and filter on most columns. Without an index a
-- filtered page reads the table in id order until it has found its rows:
-- the whole table when few rows match, however small the page. An index on
-- a filtered column holds (value, rowid), so a page reads its matching rows
-- in id order from the cursor and stops at its limit. The source index also
-- keeps the planner from taking UNIQUE (source, event_id) for a source
-- filter and sorting every event of the source to find the first page.
--
-- Every index here is paid for on a write path, so some filters go without:
-- events.event_id and effects.entity are found through the existing
-- (source, event_id) and (flow, entity, ...) indexes, one probe per source
-- or flow; effect states through effects_state; and audit.source and
-- effects.updated_at read in id order, because an index on a column that
-- every transition rewrites costs each transition more than the rare list
-- that filters on it saves. Partial indexes leave out the rows nobody
-- filters for; the queries repeat their predicates as literals.

CREATE INDEX events_source ON events (source);
CREATE INDEX events_type ON events (type);
CREATE INDEX events_entity ON events (entity) WHERE entity <> '';
CREATE INDEX events_disposition ON events (disposition) WHERE disposition NOT IN ('accepted', 'applied');
CREATE INDEX events_received ON events (received_at);
CREATE INDEX events_occurred ON events (occurred_at) WHERE occurred_at IS NOT NULL;

-- The entity each flow computed, for events listed by entity.
CREATE INDEX work_entity ON work (entity, event_pk);

CREATE INDEX audit_entity ON audit (entity);
CREATE INDEX audit_event ON audit (event_id);
CREATE INDEX audit_at ON audit (at);

CREATE INDEX effects_flow ON effects (flow);
CREATE INDEX effects_destination ON effects (destination);
CREATE INDEX effects_owner ON effects (owner) WHERE owner <> '';
CREATE INDEX effects_class ON effects (error_class) WHERE error_class <> '';
CREATE INDEX effects_created ON effects (created_at);
