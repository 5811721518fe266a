-- One event's deliveries are read through the event (its unique source
-- and event_id, then deliveries_event), so the index on the deliveries'
-- own copy of that pair only cost writes: its keys are the senders'
-- random ids, a page of the WAL per webhook received.
DROP INDEX deliveries_source_event;
