package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// effectsNow is when the seeded events arrive and their effects settle:
// three days before the test runs. A server on the real clock keeps them
// (retention is 30 days), and a dead effect is past the 24 h alert age of
// dead_letters, whatever today's date is.
var effectsNow = time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Second)

// seedEffect makes one effect through the real store (event in, routed to
// entity, applied, claimed) and settles its one call: dead with evidence,
// or done after a 200.
func seedEffect(t *testing.T, dbPath, eventID, entity string, state store.EffectState) int64 {
	t.Helper()
	return seedEffectWith(t, dbPath, eventID, entity, state, "HTTP 400", json.RawMessage(`{"method":"POST","path":"/x"}`))
}

// seedEffectRequest is seedEffect with the effect's request given.
func seedEffectRequest(t *testing.T, dbPath, eventID, entity string, state store.EffectState, request json.RawMessage) int64 {
	t.Helper()
	return seedEffectWith(t, dbPath, eventID, entity, state, "HTTP 400", request)
}

// seedEffectWhy is seedEffect with the reason a dead effect is given.
func seedEffectWhy(t *testing.T, dbPath, eventID, entity string, state store.EffectState, reason string) int64 {
	t.Helper()
	return seedEffectWith(t, dbPath, eventID, entity, state, reason, json.RawMessage(`{"method":"POST","path":"/x"}`))
}

// seedEffectWith is seedEffect with the reason and the request given.
func seedEffectWith(t *testing.T, dbPath, eventID, entity string, state store.EffectState, reason string, request json.RawMessage) int64 {
	t.Helper()
	ctx := context.Background()
	now := effectsNow
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-" + eventID, Source: "shop", EventID: eventID, Type: "order.created", ReceivedAt: now, Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: now, Decisions: []*store.RouteDecision{{EventPK: pk,
		Routes: []store.Route{{Flow: "orders", Entity: entity, OrderKey: "1"}}}}}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatal(err, leases)
	}
	work, err := st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "orders", Entity: entity})
	if err != nil || len(work) != 1 {
		t.Fatal(err, work)
	}
	key := "orders:" + entity + ":r1:notify"
	if _, err := st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: now, WorkID: work[0].ID, EventPK: pk, Actor: "w",
		Version: "r1", VersionSort: "1", Ordered: true, State: json.RawMessage(`"CREATED"`), ReleaseIfDrained: true,
		Effects: []*store.EffectInsert{{EpisodeKey: key, Effect: "notify", Destination: "crm", Request: request}},
	}); err != nil {
		t.Fatal(err)
	}
	claims, err := st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(claims) != 1 {
		t.Fatal(err, claims)
	}
	p := &store.EffectSettleParams{EffectID: claims[0].ID, Token: claims[0].Token, Now: now, Actor: "d", State: state, AddAttempt: true,
		Attempt: &store.Attempt{StartedAt: now, Status: 200}}
	if state == store.EffectDead {
		p.Class, p.Reason, p.SuggestedRepair = store.ClassPermanent, reason, "fix the data"
		p.Attempt = &store.Attempt{StartedAt: now, Status: 400, Class: store.ClassPermanent, Error: reason, Response: `{"error":"bad vat id"}`}
	}
	if err := st.EffectSettle(ctx, p); err != nil {
		t.Fatal(err)
	}
	return claims[0].ID
}

// effectsConfig writes a configuration naming a fresh SQLite file.
func effectsConfig(t *testing.T) (cfg, db string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "e.db")
	cfg = filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte("store: sqlite:"+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, db
}

// effects show and list name the idempotency key the effect's destination
// is sent, worked out from the config as the worker does: a vendor's
// dashboard shows that key, not the episode key.
func TestEffectsShowTheIdempotencyKeySent(t *testing.T) {
	cfg, db := effectsConfig(t)
	if err := os.WriteFile(cfg, []byte("store: sqlite:"+db+"\ndestinations:\n  - name: crm\n    preset: stripe\n    base_url: https://api.stripe.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(seedEffect(t, db, "e1", "ada@example.com", store.EffectDead))
	want := deliver.HashedKey("orders:ada@example.com:r1:notify")
	code, out, errOut := run(t, "", nil, "effects", "show", "--config", cfg, id)
	if code != 0 || !strings.Contains(out, "effect "+id+"  orders:ada@example.com:r1:notify\n  idem. key    "+want+"\n") {
		t.Fatalf("show: %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{"show", id}, {"list"}} {
		code, out, _ := run(t, "", nil, append([]string{"effects", args[0], "--config", cfg, "--format", "json"}, args[1:]...)...)
		if code != 0 || !strings.Contains(out, `"idempotency_key": "`+want+`"`) {
			t.Errorf("%s --format json: %d %s", args[0], code, out)
		}
	}
}

func TestEffectsVerb(t *testing.T) {
	cfg, db := effectsConfig(t)
	id := seedEffect(t, db, "e1", "o1", store.EffectDead)
	ids := fmt.Sprint(id)
	env := map[string]string{"USER": "alice"}

	code, out, errOut := run(t, "", env, "effects", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "orders:o1:r1:notify") || !strings.Contains(out, "dead") || !strings.Contains(out, "HTTP 400") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "", env, "effects", "show", "--config", cfg, "--format", "json", ids)
	var shown struct {
		Effect struct {
			State           string
			SuggestedRepair string `json:"suggested_repair"`
		}
		Attempts []struct{ Status int }
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Effect.State != "dead" || shown.Effect.SuggestedRepair != "fix the data" || len(shown.Attempts) != 1 || shown.Attempts[0].Status != 400 {
		t.Fatalf("show: %d %s", code, out)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"effects"}, {"effects", "frobnicate", "--config", cfg}, {"effects", "show", "--config", cfg},
		{"effects", "resolve", "--config", cfg, ids}, {"effects", "retry", "--config", cfg, "x"},
		{"effects", "assign", "--config", cfg, ids},
	} {
		if code, _, _ := run(t, "", env, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	// assign says what changed: the owner, not the state.
	code, out, _ = run(t, "", env, "effects", "assign", "--config", cfg, "--owner", "bob", ids)
	if want := fmt.Sprintf("effect %d (orders:o1:r1:notify) is now owned by bob; its state stays dead\n", id); code != 0 || out != want {
		t.Fatalf("assign: %d %q, want %q", code, out, want)
	}
	code, out, _ = run(t, "", env, "effects", "resolve", "--config", cfg, "--note", "invoice exists, checked by hand", ids)
	if code != 0 || !strings.Contains(out, "is now resolved") {
		t.Fatalf("resolve: %d %s", code, out)
	}
	// A resolved effect cannot be retried; the queue is empty now.
	if code, _, errOut := run(t, "", env, "effects", "retry", "--config", cfg, "--note", "again", ids); code != 1 || !strings.Contains(errOut, "not allowed") {
		t.Fatalf("retry of a resolved effect: %d %s", code, errOut)
	}
	if _, out, _ := run(t, "", env, "effects", "list", "--config", cfg); !strings.Contains(out, "(no effects)") {
		t.Fatalf("queue after resolve: %s", out)
	}
	if _, out, _ := run(t, "", env, "effects", "list", "--config", cfg, "--state", "any"); !strings.Contains(out, "resolved") {
		t.Fatalf("--state any after resolve: %s", out)
	}
	_, out, _ = run(t, "", env, "effects", "show", "--config", cfg, ids)
	if !strings.Contains(out, "bob") || !strings.Contains(out, "checked by hand") {
		t.Fatalf("show after operations lacks owner or note: %s", out)
	}
}

// The list's flags are checked like the API's parameters: a bad value is a
// usage error naming the flag, before the store is opened.
func TestEffectsListRefusesBadFilters(t *testing.T) {
	cfg, _ := effectsConfig(t)
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--state", "bogus"}, "--state"},
		{[]string{"--state", "dead,bogus"}, "--state"},
		{[]string{"--class", "flaky"}, "--class"},
		{[]string{"--limit", "0"}, "--limit"},
		{[]string{"--limit", "1001"}, "--limit"},
		{[]string{"--cursor", "nope!"}, "--cursor"},
		{[]string{"--created-from", "yesterday"}, "--created-from"},
		{[]string{"--updated-from", "2026-11-03T10:00:00Z", "--updated-to", "2026-11-03T09:00:00Z"}, "--updated-to"},
	} {
		code, out, errOut := run(t, "", nil, append([]string{"effects", "list", "--config", cfg}, c.args...)...)
		if code != 2 || !strings.HasPrefix(errOut, "hookledger effects list: "+c.flag+": ") || out != "" {
			t.Errorf("%v: exit %d, stderr %q, want 2 naming %s", c.args, code, errOut, c.flag)
		}
		if strings.Contains(errOut, "_from") || strings.Contains(errOut, "_to") {
			t.Errorf("%v: names a parameter, not a flag: %q", c.args, errOut)
		}
	}
}

// A page that is not the last says how to get the next one.
func TestEffectsListPages(t *testing.T) {
	cfg, db := effectsConfig(t)
	var ids []int64
	for i := range 3 {
		ids = append(ids, seedEffect(t, db, fmt.Sprint("e", i), fmt.Sprint("o", i), store.EffectDead))
	}
	seedEffect(t, db, "e9", "o9", store.EffectDone) // not in the queue
	code, out, errOut := run(t, "", nil, "effects", "list", "--config", cfg, "--limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "orders:o1:") || strings.Contains(out, "orders:o2:") {
		t.Fatalf("first page: %d %q", code, out)
	}
	cursor, ok := strings.CutPrefix(strings.TrimSpace(errOut), "more: run again with --cursor ")
	if !ok || cursor == "" {
		t.Fatalf("first page stderr %q, want the next cursor", errOut)
	}
	code, out, errOut = run(t, "", nil, "effects", "list", "--config", cfg, "--limit", "2", "--cursor", cursor)
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "orders:o2:") || errOut != "" {
		t.Fatalf("last page: %d %q %q", code, out, errOut)
	}
	// JSON carries the cursor as the API does.
	_, out, _ = run(t, "", nil, "effects", "list", "--config", cfg, "--limit", "1", "--format", "json")
	var page struct {
		Effects    []struct{ ID int64 }
		NextCursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Effects) != 1 || page.Effects[0].ID != ids[0] || page.NextCursor == "" {
		t.Fatalf("json page: %v %s", err, out)
	}
	// --state any lists the done effect too, and --destination filters.
	if _, out, _ := run(t, "", nil, "effects", "list", "--config", cfg, "--state", "any", "--destination", "crm"); strings.Count(out, "\n") != 5 {
		t.Fatalf("--state any: %q", out)
	}
	if _, out, _ := run(t, "", nil, "effects", "list", "--config", cfg, "--state", "done"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "orders:o9:") {
		t.Fatalf("--state done: %q", out)
	}
}

// Text from the network reaches the terminal escaped: a destination's
// answer carrying ESC [ 2 J (clear the screen) and a newline (a forged
// row) prints as visible escapes on one line. (Identities cannot carry
// control characters: the receiver and the router refuse them.)
func TestEffectsEscapeTerminalControls(t *testing.T) {
	cfg, db := effectsConfig(t)
	reason := "HTTP 400: o1\x1b[2J\nFORGED"
	id := seedEffectWhy(t, db, "e1", "o1", store.EffectDead, reason)
	_, list, _ := run(t, "", nil, "effects", "list", "--config", cfg)
	_, show, _ := run(t, "", nil, "effects", "show", "--config", cfg, fmt.Sprint(id))
	for name, out := range map[string]string{"list": list, "show": show} {
		if strings.ContainsAny(out, "\x1b\r") || strings.Contains(out, "\nFORGED") {
			t.Errorf("%s prints raw control characters: %q", name, out)
		}
		if !strings.Contains(out, `HTTP 400: o1\x1b[2J\x0aFORGED`) {
			t.Errorf("%s lacks the escaped reason: %q", name, out)
		}
	}
	// JSON escapes them by itself and keeps the value exact.
	_, out, _ := run(t, "", nil, "effects", "show", "--config", cfg, "--format", "json", fmt.Sprint(id))
	var shown struct{ Effect struct{ Reason string } }
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.Effect.Reason != reason || strings.Contains(out, "\x1b") {
		t.Errorf("json: %v %q", err, out)
	}
}

// A successful call shows class success, not a dash.
func TestEffectsShowSuccess(t *testing.T) {
	cfg, db := effectsConfig(t)
	id := seedEffect(t, db, "e1", "o1", store.EffectDone)
	code, out, _ := run(t, "", nil, "effects", "show", "--config", cfg, fmt.Sprint(id))
	lines := strings.Split(out, "\n")
	var row string
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#") && i+1 < len(lines) {
			row = lines[i+1]
		}
	}
	if f := strings.Fields(row); code != 0 || len(f) < 5 || f[3] != "200" || f[4] != "success" {
		t.Fatalf("attempt row %q in:\n%s", row, out)
	}
}

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"sub_123":             "sub_123",
		"Zürich ✓ 東京":         "Zürich ✓ 東京",
		"a\x1b[2Jb":           `a\x1b[2Jb`,
		"row\nforged\r":       `row\x0aforged\x0d`,
		"col\tshift":          `col\x09shift`,
		"del\x7f":             `del\x7f`,
		"csi\u009b31m":        `csi\x9b31m`,
		"bad\xff\xfeutf8":     `bad\xff\xfeutf8`,
		"cut\xe6\x9d":         `cut\xe6\x9d`,
		"evil\u202egnp.exe":   `evil\u202egnp.exe`,
		"iso\u2066x\u2069":    `iso\u2066x\u2069`,
		"ok\ufffdreplacement": "ok\ufffdreplacement",
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %q, want %q", in, got, want)
		}
	}
}

// effects show prints a request as the console shows it: indented when
// small and shallow, else as stored and cut at 64 KiB with a note, so a
// 1 MiB request nested 9,990 deep prints a bounded screenful rather than
// the 200 MB its indentation would be. --request prints it whole.
func TestEffectsShowBoundsTheRequest(t *testing.T) {
	cfg, db := effectsConfig(t)
	small := seedEffect(t, db, "e1", "o1", store.EffectDead)
	deep := `{"deep":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `,"pad":"` + strings.Repeat("x", 1<<20) + `"}`
	big := seedEffectRequest(t, db, "e2", "o2", store.EffectDead, json.RawMessage(deep))

	_, out, _ := run(t, "", nil, "effects", "show", "--config", cfg, fmt.Sprint(small))
	if !strings.Contains(out, "  request\n    {\n      \"method\": \"POST\",\n      \"path\": \"/x\"\n    }\n") {
		t.Errorf("small request not indented under its label:\n%s", out)
	}
	code, out, _ := run(t, "", nil, "effects", "show", "--config", cfg, fmt.Sprint(big))
	note := fmt.Sprintf("cut: the first 65536 of %d bytes are shown, as stored (not pretty-printed: larger than 64 KiB); "+
		"the whole request: hookledger effects show --request %d", len(deep), big)
	if code != 0 || len(out) > 80<<10 || !strings.Contains(out, note) || !strings.Contains(out, "\n    "+deep[:1000]) {
		t.Errorf("deep request: exit %d, %d bytes printed, want under 80 KiB with the note %q and the request's first bytes", code, len(out), note)
	}
	if code, out, _ := run(t, "", nil, "effects", "show", "--config", cfg, "--request", fmt.Sprint(big)); code != 0 || out != deep {
		t.Errorf("--request: exit %d, %d bytes, want exactly the %d stored", code, len(out), len(deep))
	}
	for _, args := range [][]string{
		{"effects", "show", "--config", cfg, "--request", "--format", "json", fmt.Sprint(big)},
		{"effects", "show", "--server", "http://127.0.0.1:1", "--request", fmt.Sprint(big)},
		{"effects", "retry", "--config", cfg, "--note", "n", "--request", fmt.Sprint(big)},
	} {
		if code, _, errOut := run(t, "", nil, args...); code != 2 || !strings.Contains(errOut, "--request") {
			t.Errorf("%v: exit %d %q, want 2 naming --request", args, code, errOut)
		}
	}
}

// effects show counts calls across restarts of the retry count, as the
// attempt rows number them, whether the effect came from the store (which
// knows the count) or from the API (whose rows say it).
func TestAttemptsLineCountsAcrossRestarts(t *testing.T) {
	atts := []*store.Attempt{{Number: 1}, {Number: 2}, {Number: 2, Reconcile: true}, {Number: 3, Restart: store.RestartOperatorRetry}}
	for _, e := range []*store.Effect{{Attempts: 1, Calls: 3, Redrives: 1}, {Attempts: 1, Redrives: 1}} {
		if got, want := attemptsLine(e, atts), "3 (1 since the last restart), re-drives 1"; got != want {
			t.Errorf("calls %d: %q, want %q", e.Calls, got, want)
		}
	}
	if got, want := attemptsLine(&store.Effect{Attempts: 2}, atts[:2]), "2, re-drives 0"; got != want {
		t.Errorf("no restart: %q, want %q", got, want)
	}
}
