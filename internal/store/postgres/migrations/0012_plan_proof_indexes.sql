-- Indexes that match the pipeline's hot statements exactly, so the planner
-- picks them even before the first ANALYZE. A fresh database (a new
-- install, a burst into an empty table) has no statistics, and with none
-- the planner took effects_flow for the supersede step (walking every
-- effect of the flow per settle) and the primary key of deliveries for the
-- first-delivery lookup (walking every delivery before it): both grew with
-- the table and cost milliseconds per event within minutes.

-- The supersede step's candidates: open effects of one entity and name.
-- Holds only open effects, so it stays small however long the ledger.
CREATE INDEX effects_open ON effects (flow, entity, effect, version_sort)
    WHERE state IN ('approved', 'retry_wait') AND compensates = 0;

-- An event's first delivery, read as the first entry of its range.
DROP INDEX deliveries_event;
CREATE INDEX deliveries_event ON deliveries (event_pk, id);

-- The routing page: exactly the events it lists.
DROP INDEX events_unrouted;
CREATE INDEX events_unrouted ON events (pk) WHERE NOT routed AND disposition = 'accepted';
