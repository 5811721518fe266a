-- Retention (docs/retention.md): the pruning pass asks, for every event
-- past its source's cutoff, whether anything still needs it. Each question
-- is one probe of an index here instead of a scan: does an effect name it
-- as its source, is it an entity's applied event, which loop visits did it
-- record. work_event, deliveries_event and audit's primary key already
-- serve the rest. The pass walks events and audit rows in key order with
-- a cursor, so no index on a time column is added to the write path.
CREATE INDEX effects_source_event ON effects (source_event_pk);
CREATE INDEX entities_applied_event ON entities (applied_event_pk) WHERE applied_event_pk IS NOT NULL;
CREATE INDEX loop_visits_event ON loop_visits (event_pk);
