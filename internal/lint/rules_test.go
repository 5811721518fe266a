package lint

import (
	"strings"
	"testing"
)

// flow returns a flow that passes every rule that applies to it; each test
// case changes only the cells it is about.
func flow(change func(f *Flow)) Flow {
	f := Flow{
		Line:                 2,
		ID:                   "billing_to_crm",
		Method:               methodCustom,
		CreatesRecords:       Yes,
		SideEffect:           "upsert_deal",
		IdempotencyKey:       "billing_to_crm+subscription_id+revision",
		LedgerRetentionDays:  Num(90),
		MaxReplayWindowDays:  Num(30),
		RetryLayers:          RetryLayers{Known: true, Layers: []RetryLayer{{"worker", 6}}},
		RetryAfterUnit:       "seconds",
		InboundWebhook:       Yes,
		AckP99Seconds:        Num(1),
		SenderTimeoutSeconds: Num(5),
	}
	if change != nil {
		change(&f)
	}
	return f
}

type ruleCase struct {
	name  string
	flow  Flow
	level Level  // "" when the rule must not apply
	want  string // substring of the message
}

func runRuleCases(t *testing.T, rule string, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckFlows([]Flow{tc.flow})
			var got []Finding
			for _, f := range rep.Findings {
				if f.Rule == rule {
					got = append(got, f)
				}
			}
			if tc.level == "" {
				if len(got) != 0 {
					t.Fatalf("%s should not apply, got %s: %s", rule, got[0].Level, got[0].Message)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one %s finding, got %d: %+v", rule, len(got), got)
			}
			if got[0].Level != tc.level {
				t.Errorf("level = %s, want %s (message: %s)", got[0].Level, tc.level, got[0].Message)
			}
			if !strings.Contains(got[0].Message, tc.want) {
				t.Errorf("message %q does not contain %q", got[0].Message, tc.want)
			}
			if got[0].Flow != tc.flow.ID || got[0].Line != tc.flow.Line {
				t.Errorf("finding names flow %q line %d, want %q line %d", got[0].Flow, got[0].Line, tc.flow.ID, tc.flow.Line)
			}
		})
	}
}

func TestIP01(t *testing.T) {
	runRuleCases(t, "IP01", []ruleCase{
		{"creates records without key", flow(func(f *Flow) { f.SideEffect = "none"; f.IdempotencyKey = "" }), fail, "creates records but idempotency_key is blank"},
		{"side effect without key", flow(func(f *Flow) { f.CreatesRecords = No; f.IdempotencyKey = "" }), fail, `has side effect "upsert_deal"`},
		{"blank side effect counts as unknown effect", flow(func(f *Flow) { f.CreatesRecords = unknown; f.SideEffect = ""; f.IdempotencyKey = "" }), fail, "write none in side_effect"},
		{"key set", flow(nil), pass, "is set"},
		{"no records and side effect none", flow(func(f *Flow) { f.CreatesRecords = No; f.SideEffect = "None"; f.IdempotencyKey = "" }), "", ""},
		{"blank creates_records is not yes", flow(func(f *Flow) { f.CreatesRecords = unknown; f.SideEffect = "none"; f.IdempotencyKey = "" }), "", ""},
	})
}

func TestIP02(t *testing.T) {
	key := func(k string) Flow { return flow(func(f *Flow) { f.IdempotencyKey = k }) }
	keyOn := func(k string, change func(f *Flow)) Flow {
		return flow(func(f *Flow) { f.IdempotencyKey = k; change(f) })
	}
	runRuleCases(t, "IP02", []ruleCase{
		// FAIL words, each rule word and its inflections.
		{"attempt", key("deal_id+attempt"), fail, `"attempt" in part "attempt"`},
		{"attempt number camelCase", key("dealId+attemptNumber"), fail, `"attempt"`},
		{"attempts plural", key("deal_id+attempts"), fail, `"attempt"`},
		{"attempt with digit", key("deal_id_attempt2"), fail, `"attempt"`},
		{"delivery", key("deal_id+delivery"), fail, `"delivery"`},
		{"delivery time", key("deal_id+delivery_time"), fail, `"delivery"`},
		{"received at", key("deal_id+received_at"), fail, `"received"`},
		{"receivedAt camelCase", key("dealId+receivedAt"), fail, `"received"`},
		{"arrival", key("deal_id+arrival_ts"), fail, `"arrival"`},
		{"arrived", key("deal_id+arrived_at"), fail, `"arrival"`},
		{"now", key("deal_id+now()"), fail, `"now"`},
		{"NOW upper case", key("deal_id+NOW"), fail, `"now"`},
		{"timestamp now camel", key("deal_id+tsNow"), fail, `"now"`},
		{"random", key("deal_id+random()"), fail, `"random"`},
		{"gen_random_uuid", key("gen_random_uuid()"), fail, `"random"`},
		{"retry", key("deal_id+retry"), fail, `"retry"`},
		{"retries", key("deal_id+retries"), fail, `"retry"`},
		{"retrying", key("deal_id+retrying_flag"), fail, `"retry"`},
		{"retryCount", key("deal_id+retryCount"), fail, `"retry"`},
		{"HTTPRetry", key("deal_id+HTTPRetryNo"), fail, `"retry"`},
		{"uuid4", key("uuid4"), fail, `"uuid4"`},
		{"uuid.uuid4()", key("deal_id+uuid.uuid4()"), fail, `"uuid4"`},
		{"UUIDv4", key("deal_id+UUIDv4"), fail, `"uuid4"`},
		{"uuid_v4", key("deal_id+uuid_v4"), fail, `"uuid4"`},
		{"FAIL wins over WARN", key("event_id+retry"), fail, `"retry"`},
		{"FAIL applies on event_pipeline too", keyOn("deal_id+received_at", func(f *Flow) { f.Method = MethodEventPipeline }), fail, `"received"`},
		{"FAIL applies without effects", keyOn("deal_id+now", func(f *Flow) { f.CreatesRecords = No; f.SideEffect = "none" }), fail, `"now"`},

		// Ordinary words that contain a rule word's letters: no alarm.
		{"known_id is not now", key("known_id+revision"), pass, "uses no attempt"},
		{"nowhere is not now", key("nowhere+revision"), pass, ""},
		{"snowflake_id is not now", key("snowflake_id+revision"), pass, ""},
		{"knowledge article", key("knowledge_article_id+version"), pass, ""},
		{"receipt is not received", key("receipt_id+revision"), pass, ""},
		{"deliverable is not delivery", key("deliverable_id+version"), pass, ""},
		{"retryable is not retry", key("retryable_job_id+version"), pass, ""},
		{"randomizer_config is one word", key("randomizerconfig_id+version"), pass, ""},
		{"arrivederci", key("arrivederci_campaign_id+version"), pass, ""},
		{"plain uuid is a stable object id", key("contact_uuid+version"), pass, ""},
		{"attemptless glued word", key("attemptless_id+version"), pass, ""},

		// Parts naming the flow itself are ignored.
		{"flow named after a rule word", flow(func(f *Flow) { f.ID = "retry_handler"; f.IdempotencyKey = "retry_handler+job_id+version" }), pass, ""},
		{"flow name in other spelling", flow(func(f *Flow) { f.ID = "now_playing"; f.IdempotencyKey = "NowPlaying+track_id+version" }), pass, ""},
		{"flow name does not hide a rule word elsewhere", flow(func(f *Flow) { f.ID = "retry_handler"; f.IdempotencyKey = "retry_handler+retry_count" }), fail, `part "retry_count"`},

		// WARN: every part names a delivery key.
		{"event_id", key("event_id"), warn, "only the delivery key"},
		{"eventid without underscore", key("eventid"), warn, ""},
		{"eventId camelCase", key("eventId"), warn, ""},
		{"message_id", key("message_id"), warn, ""},
		{"webhook-id header", key("headers.webhook-id"), warn, ""},
		{"delivery_id is a delivery key, not a FAIL word", key("delivery_id"), warn, ""},
		{"deliveryid", key("deliveryid"), warn, ""},
		{"hash of event id", key("sha256(event_id)"), warn, ""},
		// A key sent hashed (hookledger's idempotency.key: hashed) is judged
		// on what it hashes: hashing neither makes a key stable nor spoils it.
		{"hash of the business identity", key("sha256(billing_to_crm+subscription_id+revision)"), pass, "uses no attempt"},
		{"hash of attempt data", key("sha256(deal_id+attempt)"), fail, `"attempt"`},
		{"two delivery keys", key("event_id+message_id"), warn, ""},
		{"flow part ignored", key("billing_to_crm+event_id"), warn, ""},
		{"flow_id word ignored", key("flow_id+event_id"), warn, ""},
		{"WARN only for methods other than event_pipeline", keyOn("event_id", func(f *Flow) { f.Method = MethodEventPipeline }), pass, ""},
		{"WARN for ipaas", keyOn("event_id", func(f *Flow) { f.Method = methodIPaaS }), warn, ""},
		{"WARN only with effects", keyOn("event_id", func(f *Flow) { f.CreatesRecords = No; f.SideEffect = "none" }), pass, ""},
		{"WARN with side effect only", keyOn("event_id", func(f *Flow) { f.CreatesRecords = No }), warn, ""},
		{"event id plus business version is fine", key("event_id+revision"), pass, ""},
		{"only the flow name is not a delivery key", key("billing_to_crm"), pass, ""},
		{"object id is not a delivery key", key("data.object.id"), pass, ""},
		{"event type is not a delivery key", key("event_type+object_id"), pass, ""},

		{"blank key: IP01's business", key(""), "", ""},
	})
}

func TestIP03(t *testing.T) {
	days := func(retention, window Number) Flow {
		return flow(func(f *Flow) { f.LedgerRetentionDays = retention; f.MaxReplayWindowDays = window })
	}
	noEffect := func(f *Flow) { f.CreatesRecords = No; f.SideEffect = "none" }
	runRuleCases(t, "IP03", []ruleCase{
		{"retention below window", days(Num(14), Num(60)), fail, "ledger_retention_days 14 is below max_replay_window_days 60"},
		{"retention just below window", days(Num(29.5), Num(30)), fail, "below"},
		{"retention equal to window", days(Num(30), Num(30)), pass, "covers the 30-day replay window"},
		{"retention above window", days(Num(90), Num(30)), pass, ""},
		{"FAIL without effects too", flow(func(f *Flow) { noEffect(f); f.LedgerRetentionDays = Num(1); f.MaxReplayWindowDays = Num(3) }), fail, "below"},
		{"retention blank", days(Number{}, Num(30)), warn, "ledger_retention_days is blank"},
		{"window blank", days(Num(30), Number{}), warn, "max_replay_window_days is blank"},
		{"both blank", days(Number{}, Number{}), warn, "ledger_retention_days and max_replay_window_days are blank"},
		{"blank without effects", flow(func(f *Flow) { noEffect(f); f.LedgerRetentionDays = Number{} }), "", ""},
		{"window from stripe", flow(func(f *Flow) {
			f.MaxReplayWindowDays = Number{}
			f.Sources = []string{"stripe"}
			f.LedgerRetentionDays = Num(14)
		}), fail,
			"max_replay_window_days taken as 30 from the vendor catalogue: stripe manual resend window of 30 days"},
		{"longest of several vendors", flow(func(f *Flow) {
			f.MaxReplayWindowDays = Number{}
			f.Sources = []string{"stripe", "zapier"}
			f.LedgerRetentionDays = Num(60)
		}), pass,
			"taken as 60 from the vendor catalogue: zapier replay window"},
		{"given window is not overridden", flow(func(f *Flow) {
			f.MaxReplayWindowDays = Num(2)
			f.Sources = []string{"zapier"}
			f.LedgerRetentionDays = Num(2)
		}), pass, "covers the 2-day"},
		{"vendor without windows", flow(func(f *Flow) { f.MaxReplayWindowDays = Number{}; f.Sources = []string{"meta"} }), warn,
			"none of the sources (meta) states a retry, resend or replay window"},
	})
}

func TestRT01(t *testing.T) {
	layers := func(v string) Flow {
		rl, err := parseRetryLayers(v)
		if err != nil {
			t.Fatalf("ParseRetryLayers(%q): %v", v, err)
		}
		return flow(func(f *Flow) { f.RetryLayers = rl })
	}
	runRuleCases(t, "RT01", []ruleCase{
		{"reference example 15", layers("sdk:3;worker:5"), fail, "multiply to 15 attempts per call, above 10"},
		{"product 11", layers("worker:11"), fail, "multiply to 11"},
		{"product exactly 10 in one layer", layers("worker:10"), pass, "10 attempts in all"},
		{"product exactly 10 in two layers", layers("sdk:2;worker:5"), warn, "2 layers retry (sdk:2, worker:5; 10 attempts in all)"},
		{"two layers of 2", layers("sdk:2;worker:2"), warn, "2 layers retry"},
		{"one retrying layer among ones", layers("sdk:1;http:1;worker:6"), pass, "at most one layer retries"},
		{"three layers of three", layers("sdk:3;http:3;worker:3"), fail, "multiply to 27"},
		{"huge product does not overflow", layers("a:1000000;b:1000000;c:1000000"), fail, "over 1000000"},
		{"none", layers("none"), pass, "no layer retries"},
		{"NONE any case", layers("NONE"), pass, "no layer retries"},
		{"blank means unknown", layers(""), warn, "retry_layers is blank, which means unknown"},
	})
}

func TestRT02(t *testing.T) {
	method := func(m Method, unit string) Flow {
		return flow(func(f *Flow) { f.Method = m; f.RetryAfterUnit = unit })
	}
	runRuleCases(t, "RT02", []ruleCase{
		{"custom blank", method(methodCustom, ""), warn, "retry_after_unit is blank for method custom"},
		{"ipaas blank", method(methodIPaaS, ""), warn, "method ipaas"},
		{"custom set", method(methodCustom, "milliseconds"), pass, "read in milliseconds"},
		{"event_pipeline blank", method(MethodEventPipeline, ""), "", ""},
	})
}

func TestWH01(t *testing.T) {
	ack := func(ack, timeout Number) Flow {
		return flow(func(f *Flow) { f.AckP99Seconds = ack; f.SenderTimeoutSeconds = timeout })
	}
	runRuleCases(t, "WH01", []ruleCase{
		{"above half", ack(Num(4), Num(5)), fail, "4 s is above half of the sender's 5 s timeout (2.5 s)"},
		{"just above half", ack(Num(2.51), Num(5)), fail, "above half"},
		{"exactly half", ack(Num(2.5), Num(5)), pass, "within half"},
		{"exactly half with decimals", ack(Num(0.3), Num(0.6)), pass, "within half"},
		{"below half", ack(Num(1), Num(10)), pass, ""},
		{"ack blank", ack(Number{}, Num(5)), warn, "ack_p99_seconds is blank"},
		{"timeout blank", ack(Num(1), Number{}), warn, "sender_timeout_seconds is blank"},
		{"both blank", ack(Number{}, Number{}), warn, "ack_p99_seconds and sender_timeout_seconds are blank"},
		{"not inbound", flow(func(f *Flow) { f.InboundWebhook = No; f.AckP99Seconds = Num(9) }), "", ""},
		{"inbound unknown", flow(func(f *Flow) { f.InboundWebhook = unknown; f.AckP99Seconds = Num(9) }), "", ""},
		{"timeout from the shortest vendor", flow(func(f *Flow) {
			f.SenderTimeoutSeconds = Number{}
			f.AckP99Seconds = Num(3)
			f.Sources = []string{"pipedrive", "hubspot-app"}
		}), fail, "sender_timeout_seconds taken as 5 from the vendor catalogue: hubspot-app acknowledgement timeout, read 2026-11-01"},
		{"timeout from pipedrive", flow(func(f *Flow) {
			f.SenderTimeoutSeconds = Number{}
			f.AckP99Seconds = Num(5)
			f.Sources = []string{"pipedrive"}
		}), pass, "taken as 10"},
		{"vendor without timeout", flow(func(f *Flow) { f.SenderTimeoutSeconds = Number{}; f.Sources = []string{"stripe"} }), warn,
			"none of the sources (stripe) states an acknowledgement timeout"},
	})
}

func TestPassCountsOnlyAppliedRules(t *testing.T) {
	// A flow with no effects, no inbound webhook and no key: only RT01
	// (which always applies) and RT02 (custom) are checked.
	f := flow(func(f *Flow) {
		f.CreatesRecords, f.SideEffect, f.IdempotencyKey = No, "none", ""
		f.LedgerRetentionDays, f.MaxReplayWindowDays = Number{}, Number{}
		f.InboundWebhook = No
	})
	rep := CheckFlows([]Flow{f})
	if rep.Summary != (Summary{Pass: 2}) || len(rep.Findings) != 2 {
		t.Fatalf("summary %+v findings %+v, want two passes (RT01, RT02)", rep.Summary, rep.Findings)
	}
	if rep.Findings[0].Rule != "RT01" || rep.Findings[1].Rule != "RT02" {
		t.Errorf("rules %s, %s; want RT01, RT02", rep.Findings[0].Rule, rep.Findings[1].Rule)
	}
	if rep.Failed(true) {
		t.Error("a report of passes fails")
	}
}

func TestTokens(t *testing.T) {
	tests := map[string]string{
		"billing_to_crm":         "billing to crm",
		"receivedAt":             "received at",
		"HTTPRetryCount":         "http retry count",
		"attempt2":               "attempt 2",
		"uuid.uuid4()":           "uuid uuid 4",
		"{{event.id}}":           "event id",
		"headers.webhook-id":     "headers webhook id",
		"eventID":                "event id",
		"  known_id + revision ": "known id revision",
		"":                       "",
	}
	for in, want := range tests {
		if got := strings.Join(tokens(in), " "); got != want {
			t.Errorf("tokens(%q) = %q, want %q", in, got, want)
		}
	}
}
