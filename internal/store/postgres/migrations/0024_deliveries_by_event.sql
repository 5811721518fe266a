-- One event's deliveries are read through the event (its unique source
-- and event_id, then deliveries_event), so the index on the deliveries'
-- own copy of that pair only cost writes: an entry at a random place
-- (the senders' ids) for every webhook received.
DROP INDEX deliveries_source_event;
