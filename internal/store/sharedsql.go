package store

// Fragments of SQL both drivers' lists use as they are, with ?
// parameters (each driver's filter builder numbers them).
const (
	// EventIDAnySourceSQL finds an event id without its source through
	// the unique (source, event_id) index: one probe per distinct source,
	// the sources enumerated by skipping through the index from one to
	// the next (a handful, the configured ones), so no index on event_id
	// alone is needed on the ingestion path. Its parameter is the id.
	EventIDAnySourceSQL = `source IN (WITH RECURSIVE src(s) AS (
		SELECT min(source) FROM events
		UNION ALL SELECT (SELECT min(source) FROM events WHERE source > src.s) FROM src WHERE src.s IS NOT NULL)
	SELECT s FROM src WHERE s IS NOT NULL) AND event_id = ?`
	// EventEntitySQL matches the envelope entity or any route's entity.
	// Each side reads its own index from the cursor on; the envelope
	// side's index holds only events that have an envelope entity. Its
	// parameters are the entity, the cursor, the entity, the cursor.
	EventEntitySQL = `pk IN (SELECT pk FROM events WHERE entity = ? AND entity <> '' AND pk > ?
	UNION SELECT event_pk FROM work WHERE entity = ? AND event_pk > ?)`
	// EventColumnsSQL are an event's columns as the lists read them.
	EventColumnsSQL = `pk, source, event_id, type, entity, account, occurred_at, received_at, deliveries, disposition`
)

// EventRecentQuery is EventRecent's query spelt in d and its
// arguments: the newest events by the primary key backwards, of one
// source when p names one, 100 unless p.Limit says otherwise.
func EventRecentQuery(d Dialect, p *EventRecentParams) (string, []any) {
	limit := ClampStatsLimit(p.Limit, 100)
	if p.Source != "" {
		return d.Bind(`SELECT ` + EventColumnsSQL + ` FROM events WHERE source = $1 ORDER BY pk DESC LIMIT $2`), []any{p.Source, limit}
	}
	return d.Bind(`SELECT ` + EventColumnsSQL + ` FROM events ORDER BY pk DESC LIMIT $1`), []any{limit}
}
