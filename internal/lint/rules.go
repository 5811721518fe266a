package lint

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/vendors"
)

// rule is one linter rule.
type rule struct {
	// ID is the rule id, such as IP01.
	ID string
	// Title says in one line what the rule checks.
	Title string
	// Help says what a passing design looks like.
	Help string

	needs column
	check func(f *Flow, env *checkEnv) (Level, string, bool)
}

// Needs lists the inventory columns the rule reads.
func (r rule) Needs() []string { return r.needs.names() }

// allRules returns the allRules in the order findings are reported.
func allRules() []rule {
	effect := cCreatesRecords | cSideEffect
	return []rule{
		{
			ID:    "IP01",
			Title: "A flow that creates records or has a side effect needs an idempotency key",
			Help:  "Key every business effect on flow + source object ID + business version, for example billing_to_crm+subscription_id+revision, so a repeated delivery or a replay finds the effect already done. Set side_effect to none for flows without one.",
			needs: effect | cIdempotencyKey,
			check: checkIP01,
		},
		{
			ID:    "IP02",
			Title: "The idempotency key is not built from attempt or arrival data, nor from the delivery key alone",
			Help:  "Attempt numbers, per-retry delivery IDs, receipt or arrival time, now, random values and fresh UUIDs make every retry look new. The sender's event ID deduplicates deliveries, not the effect: key effects on flow + source object + business version.",
			needs: effect | cIdempotencyKey | cMethod,
			check: checkIP02,
		},
		{
			ID:    "IP03",
			Title: "Ledger retention covers the longest replay window",
			Help:  "Keep ledger rows at least as long as the longest of the source's retry window, its manual resend window, the iPaaS replay window and the backfill overlap (Stripe CLI resend 30 days, Zapier replay 60 days, HubSpot journal 3 days).",
			needs: effect | cLedgerRetentionDays | cMaxReplayWindowDays,
			check: checkIP03,
		},
		{
			ID:    "RT01",
			Title: "Only one layer retries, and nested attempts multiply to 10 or fewer",
			Help:  "Nested synchronous retries multiply the load on a failing dependency. Turn retries off in all but one layer (for example Stripe SDK retries 0 when the worker retries) and write the layers as layer:attempts, or none.",
			needs: cRetryLayers,
			check: checkRT01,
		},
		{
			ID:    "RT02",
			Title: "Custom and iPaaS flows state the unit they apply to Retry-After",
			Help:  "Retry-After is seconds or an HTTP date (RFC 9110), but HubSpot workflow webhook actions read a receiver's value as milliseconds. State the unit and log the header value, the unit applied and the wait taken.",
			needs: cMethod | cRetryAfterUnit,
			check: checkRT02,
		},
		{
			ID:    "WH01",
			Title: "Inbound webhooks are acknowledged within half the sender's timeout",
			Help:  "Commit the event durably, return 2xx, then process asynchronously, so the p99 acknowledgement stays at or under half the sender's timeout (HubSpot app webhooks 5 s, Pipedrive 10 s, Klaviyo system webhooks 5 s).",
			needs: cInboundWebhook | cAckP99Seconds | cSenderTimeoutSeconds,
			check: checkWH01,
		},
	}
}

// checkEnv is what rules share during one Check.
type checkEnv struct {
	vendors   vendors.Index
	hasSource bool // the inventory has a sources column
}

func checkIP01(f *Flow, _ *checkEnv) (Level, string, bool) {
	if !f.hasEffect() {
		return "", "", false
	}
	if f.IdempotencyKey != "" {
		return pass, fmt.Sprintf("idempotency_key %q is set for a flow that %s", f.IdempotencyKey, effectPhrase(f)), true
	}
	return fail, fmt.Sprintf("the flow %s but idempotency_key is blank: key the effect on flow + source object ID + business version (e.g. %s+object_id+revision)%s",
		effectPhrase(f), exampleFlow(f), noneHint(f)), true
}

func checkIP02(f *Flow, _ *checkEnv) (Level, string, bool) {
	key := f.IdempotencyKey
	if key == "" {
		return "", "", false
	}
	var deliveryParts, otherParts int
	for _, part := range strings.Split(key, "+") {
		part = strings.TrimSpace(part)
		if namesFlow(part, f.ID) {
			continue
		}
		if word, ok := findAttemptWord(part); ok {
			return fail, fmt.Sprintf("idempotency_key %q is built from attempt or arrival data (%q in part %q), so every retry looks new: build it from flow + source object ID + business version (e.g. %s+object_id+revision)",
				key, word, part, exampleFlow(f)), true
		}
		if namesDeliveryKey(part) {
			deliveryParts++
		} else {
			otherParts++
		}
	}
	if deliveryParts > 0 && otherParts == 0 && f.hasEffect() && f.Method != MethodEventPipeline {
		return warn, fmt.Sprintf("idempotency_key %q is only the delivery key: it stops repeated deliveries of one event, but a second event for the same change or a replay runs the effect again; key the effect on flow + source object ID + business version (e.g. %s+object_id+revision)",
			key, exampleFlow(f)), true
	}
	return pass, fmt.Sprintf("idempotency_key %q uses no attempt or arrival data", key), true
}

func checkIP03(f *Flow, env *checkEnv) (Level, string, bool) {
	retention, window := f.LedgerRetentionDays, f.MaxReplayWindowDays
	var note string
	if !window.Set && len(f.Sources) > 0 {
		window, note = fillReplayWindow(f.Sources, env.vendors)
	}
	switch {
	case retention.Set && window.Set:
		if retention.Value < window.Value {
			return fail, withNote(fmt.Sprintf("ledger_retention_days %s is below max_replay_window_days %s: a resend or replay after day %s finds no ledger row and runs the effect again; keep ledger rows for at least %s days",
				retention, window, retention, window), note), true
		}
		return pass, withNote(fmt.Sprintf("ledger retention of %s days covers the %s-day replay window", retention, window), note), true
	case !f.hasEffect():
		return "", "", false
	case f.Engine && retention.Set && !window.Set:
		return pass, "episode keys are kept for ever (a pruned effect leaves a tombstone of its key): a resend or replay after any window finds the key", true
	}
	var blank []string
	if !retention.Set {
		blank = append(blank, colLedgerRetentionDays)
	}
	if !window.Set {
		blank = append(blank, colMaxReplayWindowDays)
	}
	msg := fmt.Sprintf("%s blank for a flow that %s: fill %s so retention can be checked against the longest of the source's retry, manual resend and replay windows and the backfill overlap",
		strings.Join(blank, " and ")+pluralIs(len(blank)), effectPhrase(f), pronoun(len(blank)))
	if !window.Set && len(f.Sources) == 0 && env.hasSource {
		msg += ", or name the vendors in sources"
	}
	return warn, withNote(msg, note), true
}

// fillReplayWindow takes the longest retry, resend or replay window of the
// named vendors, in days.
func fillReplayWindow(sources []string, idx vendors.Index) (Number, string) {
	var best vendors.Window
	var from vendors.Contract
	for _, s := range sources {
		c, ok := idx.Lookup(s)
		if !ok {
			continue
		}
		if w, ok := c.LongestWindow(); ok && w.Duration > best.Duration {
			best, from = w, c
		}
	}
	if best.Duration == 0 {
		return Number{}, fmt.Sprintf("none of the sources (%s) states a retry, resend or replay window", strings.Join(sources, ", "))
	}
	days := Num(float64(best.Duration) / float64(vendors.Day))
	return days, fmt.Sprintf("max_replay_window_days taken as %s from the vendor catalogue: %s %s of %s, read %s",
		days, from.Name, best.Name, formatDuration(best.Duration), from.Read)
}

func checkRT01(f *Flow, _ *checkEnv) (Level, string, bool) {
	rl := f.RetryLayers
	if !rl.Known {
		return warn, "retry_layers is blank, which means unknown: list every layer that retries as layer:attempts (e.g. sdk:1;worker:6), or write none", true
	}
	if len(rl.Layers) == 0 {
		return pass, "no layer retries (retry_layers none)", true
	}
	product, retrying := 1, 0
	var retryingNames []string
	for _, l := range rl.Layers {
		product = min(product*l.Attempts, maxAttempts)
		if l.Attempts > 1 {
			retrying++
			retryingNames = append(retryingNames, fmt.Sprintf("%s:%d", l.Name, l.Attempts))
		}
	}
	layers := formatLayers(rl.Layers)
	switch {
	case product > 10:
		productText := strconv.Itoa(product)
		if product == maxAttempts {
			productText = "over " + productText
		}
		return fail, fmt.Sprintf("retry layers %s multiply to %s attempts per call, above 10: turn off retries in all but one layer (e.g. set SDK retries to 0 when the worker retries)", layers, productText), true
	case retrying > 1:
		return warn, fmt.Sprintf("%d layers retry (%s; %d attempts in all): keep retries in one layer and set the others to 1 attempt", retrying, strings.Join(retryingNames, ", "), product), true
	}
	return pass, fmt.Sprintf("at most one layer retries (%s; %d attempts in all)", layers, product), true
}

func checkRT02(f *Flow, _ *checkEnv) (Level, string, bool) {
	if f.Method != methodCustom && f.Method != methodIPaaS {
		return "", "", false
	}
	if f.RetryAfterUnit == "" {
		return warn, fmt.Sprintf("retry_after_unit is blank for method %s: state the unit applied to Retry-After (seconds or an HTTP date per RFC 9110; HubSpot workflow webhook actions read milliseconds) and log the value, unit and wait", f.Method), true
	}
	return pass, fmt.Sprintf("Retry-After is read in %s", f.RetryAfterUnit), true
}

func checkWH01(f *Flow, env *checkEnv) (Level, string, bool) {
	if f.InboundWebhook != Yes {
		return "", "", false
	}
	ack, timeout := f.AckP99Seconds, f.SenderTimeoutSeconds
	var note string
	if !timeout.Set && len(f.Sources) > 0 {
		timeout, note = fillAckTimeout(f.Sources, env.vendors)
	}
	if f.Engine && !ack.Set {
		return pass, withNote("hookledger acknowledges once the event is durably committed and processes it asynchronously; "+
			"measure the p99 with hookledger_receive_ack_seconds on /metrics", note), true
	}
	if !ack.Set || !timeout.Set {
		var blank []string
		if !ack.Set {
			blank = append(blank, colAckP99Seconds)
		}
		if !timeout.Set {
			blank = append(blank, colSenderTimeoutSeconds)
		}
		msg := fmt.Sprintf("%s blank for an inbound webhook: fill %s so the acknowledgement can be checked against half the sender's timeout (HubSpot app webhooks 5 s, Pipedrive 10 s, Klaviyo system webhooks 5 s)",
			strings.Join(blank, " and ")+pluralIs(len(blank)), pronoun(len(blank)))
		if !timeout.Set && len(f.Sources) == 0 && env.hasSource {
			msg += ", or name the sender in sources"
		}
		return warn, withNote(msg, note), true
	}
	// Doubling is exact in binary floating point, so the boundary (ack
	// exactly half the timeout) compares exactly as written.
	if ack.Value*2 > timeout.Value {
		return fail, withNote(fmt.Sprintf("acknowledgement p99 of %s s is above half of the sender's %s s timeout (%s s): commit the event durably, return 2xx, then process asynchronously",
			ack, timeout, Num(timeout.Value/2)), note), true
	}
	return pass, withNote(fmt.Sprintf("acknowledgement p99 of %s s is within half of the sender's %s s timeout", ack, timeout), note), true
}

// fillAckTimeout takes the shortest acknowledgement timeout of the named
// vendors, in seconds.
func fillAckTimeout(sources []string, idx vendors.Index) (Number, string) {
	var best time.Duration
	var from vendors.Contract
	for _, s := range sources {
		c, ok := idx.Lookup(s)
		if !ok || c.AckTimeout == 0 {
			continue
		}
		if best == 0 || c.AckTimeout < best {
			best, from = c.AckTimeout, c
		}
	}
	if best == 0 {
		return Number{}, fmt.Sprintf("none of the sources (%s) states an acknowledgement timeout", strings.Join(sources, ", "))
	}
	secs := Num(best.Seconds())
	return secs, fmt.Sprintf("sender_timeout_seconds taken as %s from the vendor catalogue: %s acknowledgement timeout, read %s", secs, from.Name, from.Read)
}

func effectPhrase(f *Flow) string {
	var parts []string
	if f.CreatesRecords == Yes {
		parts = append(parts, "creates records")
	}
	switch se := strings.TrimSpace(f.SideEffect); {
	case se == "":
		parts = append(parts, "may have a side effect (side_effect is blank)")
	case !strings.EqualFold(se, "none"):
		parts = append(parts, fmt.Sprintf("has side effect %q", se))
	}
	return strings.Join(parts, " and ")
}

func noneHint(f *Flow) string {
	if f.CreatesRecords != Yes && strings.TrimSpace(f.SideEffect) == "" {
		return ", or write none in side_effect if it has no effect"
	}
	return ""
}

func exampleFlow(f *Flow) string {
	if f.ID == "" {
		return "flow_id"
	}
	return f.ID
}

func withNote(msg, note string) string {
	if note == "" {
		return msg
	}
	return msg + "; " + note
}

func pluralIs(n int) string {
	if n > 1 {
		return " are"
	}
	return " is"
}

func pronoun(n int) string {
	if n > 1 {
		return "them"
	}
	return "it"
}

func formatLayers(ls []RetryLayer) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%s:%d", l.Name, l.Attempts)
	}
	return strings.Join(parts, ";")
}

// formatDuration writes a vendor window the way vendors quote it.
func formatDuration(d time.Duration) string {
	switch {
	case d%vendors.Day == 0 && d > 2*vendors.Day:
		// Vendors quote a day or two in hours (24 hours, 48 hours).
		return plural(int(d/vendors.Day), "day")
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0 && d < time.Hour:
		return plural(int(d/time.Minute), "minute")
	}
	return d.String()
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}
