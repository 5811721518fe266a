package store

// The SQL of each SignalQuery, returning (key, sub-key, count, oldest)
// rows; what the rows mean is written on the query. The signals read
// partial indexes and maintained columns only, so that their cost follows
// the size of what they report (the lagging entities, the pending
// backlog, the exception queue, the window's audit rows), never the size
// of the store. Each query repeats its partial index's predicate (or
// implies it), which is what lets PostgreSQL's planner use that index,
// and names the index for SQLite ({index name}), which plans without
// statistics and might otherwise prefer a full index that also yields
// the GROUP BY order (the entities' primary key for a GROUP BY flow, say)
// and read every row. Each driver's TestSignalPlans pins the plans.
var signalSQL = map[SignalQuery]string{
	// Lagging entities per flow: a scan of entities_behind, which holds
	// the lagging entities only; behind_since comes from the index.
	SignalQueryLagByFlow: `SELECT flow, '', count(*), min(behind_since) FROM entities {index entities_behind}
		WHERE newest_key > settled_key GROUP BY flow`,
	// The lagging entity with the most routed events ahead of its settled
	// key: for each lagging entity (entities_behind) its pending items
	// (work_pending: flow, entity, order_key) and its dead letters
	// (work_dead), each a range of its own index from the settled key on.
	// Only the 100 entities that have lagged longest (the front of
	// entities_behind) are measured: two probes per entity are nothing
	// for a handful, but an incident that leaves thousands of entities
	// behind would make every measurement pay for all of them (0.4 s
	// for 2,000 on PostgreSQL). The entity stuck longest is the one an
	// operator looks at first anyway.
	SignalQueryLagLargest: `SELECT en.flow || '/' || en.entity, '', (SELECT count(*) FROM (
			SELECT w.event_pk FROM work w {index work_pending}
				WHERE w.flow = en.flow AND w.entity = en.entity AND w.done_at IS NULL AND w.order_key > en.settled_key
			UNION
			SELECT w.event_pk FROM work w {index work_dead}
				WHERE w.flow = en.flow AND w.entity = en.entity AND w.disposition = 'dead_lettered' AND w.order_key > en.settled_key) ahead) AS gap,
		CAST(NULL AS timestamptz) FROM (SELECT flow, entity, settled_key FROM entities {index entities_behind}
			WHERE newest_key > settled_key ORDER BY behind_since LIMIT 100) en
		ORDER BY gap DESC, en.flow, en.entity LIMIT 1`,
	// Accepted events per source: events_accepted holds exactly the
	// events without a terminal disposition.
	SignalQueryUnfinished: `SELECT source, '', count(*), min(received_at) FROM events {index events_accepted}
		WHERE disposition = 'accepted' GROUP BY source`,
	// Pending effects with a deadline that warns or has passed:
	// effects_deadline holds pending effects with a deadline only (its
	// predicate repeated); the passed ones are its range deadline_at <= now.
	SignalQueryDeadline: `SELECT destination, CASE WHEN deadline_at <= $1 THEN 'passed' ELSE 'near' END, count(*),
		min(CASE WHEN deadline_at <= $1 THEN deadline_at END) FROM effects {index effects_deadline}
		WHERE deadline_at IS NOT NULL AND state IN ('approved', 'submitting', 'acknowledged', 'retry_wait', 'needs_reconciliation')
		AND (deadline_at <= $1 OR deadline_warn_at <= $1) GROUP BY 1, 2`,
	// Unknown outcomes: two equality ranges of effects_state (state,
	// next_attempt_at): needs_reconciliation, and submitting (the
	// calls in flight, as many as the workers make at once).
	SignalQueryUnknown: `SELECT destination, '', count(*), min(updated_at) FROM (
		SELECT destination, updated_at FROM effects {index effects_state}
			WHERE state = 'needs_reconciliation' AND mismatch_at IS NULL
		UNION ALL
		SELECT destination, updated_at FROM effects {index effects_state}
			WHERE state = 'submitting' AND lease_until <= $1) unknown GROUP BY destination`,
	// The window starts at the first audit row at or after its start,
	// found in audit_at (the earliest time, then the lowest id of the few
	// rows at that instant); the rows counted are then ranges of
	// audit_action (action, id) from that id on, re-checked on at because
	// audit times come from the callers and need not follow ids exactly.
	SignalQueryWindowStart: `SELECT '', '', first, CAST(NULL AS timestamptz) FROM (
		SELECT min(id) AS first FROM audit {index audit_at} WHERE at = (
			SELECT min(at) FROM audit {index audit_at} WHERE at >= $1)) w WHERE first IS NOT NULL`,
	SignalQueryWindowAudit: `SELECT action, CASE WHEN action <> 'key_conflict' THEN action
			WHEN detail LIKE 'version %' THEN 'version' ELSE 'episode_key' END, count(*), min(at)
		FROM audit {index audit_action}
		WHERE action IN ('key_conflict', 'loop_blocked', 'loop_hop_limit') AND id >= $1 AND at >= $2 GROUP BY 1, 2`,
	// Dead effects: a range of effects_state; dead-lettered events: a range
	// of events_disposition (its predicate repeated so that it applies).
	SignalQueryDeadEffects: `SELECT CASE WHEN owner = '' THEN 'unassigned' ELSE owner END, '', count(*), min(updated_at)
		FROM effects {index effects_state} WHERE state = 'dead' GROUP BY 1`,
	SignalQueryDeadEvents: `SELECT 'events', '', count(*), min(received_at) FROM events {index events_disposition}
		WHERE disposition = 'dead_lettered' AND disposition NOT IN ('accepted', 'applied')`,
	// work_dead holds the dead-lettered work rows only; a resolved event
	// keeps its rows but leaves the events' dead_lettered range.
	SignalQueryDeadEventsByFlow: `SELECT w.flow, '', count(DISTINCT w.event_pk), min(e.received_at)
		FROM work w {index work_dead} JOIN events e ON e.pk = w.event_pk
		WHERE w.disposition = 'dead_lettered' AND e.disposition = 'dead_lettered' GROUP BY w.flow`,
	// Marked effects: effects_mismatch holds them only.
	SignalQueryMismatch: `SELECT destination, '', count(*), min(mismatch_at) FROM effects {index effects_mismatch}
		WHERE mismatch_at IS NOT NULL GROUP BY destination`,
	// Outstanding compensations: effects_compensation holds compensations
	// only, by state; the finished states are left out of the range.
	SignalQueryCompensation: `SELECT destination, '', count(*), min(created_at) FROM effects {index effects_compensation}
		WHERE compensates <> 0 AND state IN ('approved', 'submitting', 'acknowledged', 'needs_reconciliation', 'retry_wait', 'dead')
		GROUP BY destination`,
}

// SignalSQL returns the statement of every signal query spelt in d, for
// a driver's SignalReader and its plan tests.
func SignalSQL(d Dialect) map[SignalQuery]string {
	out := make(map[SignalQuery]string, len(signalSQL))
	for q, s := range signalSQL {
		out[q] = d.Bind(s)
	}
	return out
}
