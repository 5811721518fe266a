-- The W3C traceparent of the request that brought an event in ('' when
-- tracing was off): processing and every delivery attempt continue its
-- trace. Effects read it through their source event. A constant default
-- adds the column without rewriting the table.
ALTER TABLE events ADD COLUMN trace_context text COLLATE "C" NOT NULL DEFAULT '';
