package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/postgres"
)

// Two serve processes on one PostgreSQL share the work: each entity is
// processed by one of them at a time, in business order, and every effect
// exists once.
func TestTwoServeProcessesOnOnePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	dbURL := pgtest.NewDatabase(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
sources:
  - name: shop
    kind: hmac
    secrets: [multi-secret]
    hmac: {header: X-Signature}
processing:
  workers: 4
  poll_interval: 10ms
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: sync
        destination: crm
        request: {path: '"/orders/" + entity', body: '{"state": state}'}
destinations:
  - {name: crm, base_url: "http://127.0.0.1:1", allow_private_networks: true}  # refuses: effects wait to retry
`, dbURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startBinary(t, bin, cfg)
	b := startBinary(t, bin, cfg)

	const entities, revisions = 40, 5
	type ev struct {
		entity string
		rev    int
	}
	var evs []ev
	for e := range entities {
		for r := 1; r <= revisions; r++ {
			evs = append(evs, ev{fmt.Sprintf("o%02d", e), r})
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })

	var wg sync.WaitGroup
	errs := make(chan error, len(evs))
	for i, e := range evs {
		addr := a.addr
		if i%2 == 1 {
			addr = b.addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"eventId":"%s-r%d","type":"order.updated","order_id":%q,"rev":%d,"state":"S%d"}`, e.entity, e.rev, e.entity, e.rev, e.rev)
			m := hmac.New(sha256.New, []byte("multi-secret"))
			m.Write([]byte(body))
			req, _ := http.NewRequest("POST", "http://"+addr+"/hooks/shop", bytes.NewReader([]byte(body)))
			req.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("POST %s: %d", body, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := st.WorkCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d work items still pending after 60 s\nA:\n%s\nB:\n%s", n, a.logs, b.logs)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the processes, not measuring time
	}

	for e := range entities {
		id := fmt.Sprintf("o%02d", e)
		p, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "orders", Entity: id})
		if err != nil || p == nil || p.Version != fmt.Sprintf("r%d", revisions) || string(p.State) != fmt.Sprintf(`"S%d"`, revisions) {
			t.Fatalf("projection of %s = %+v (%v), want the newest revision r%d", id, p, err, revisions)
		}
	}
	seen := map[string]bool{}
	after := int64(0)
	for {
		effs, err := st.EffectList(ctx, &store.EffectListParams{Flow: "orders", AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(effs) == 0 {
			break
		}
		for _, e := range effs {
			if seen[e.EpisodeKey] {
				t.Fatalf("episode %s exists twice", e.EpisodeKey)
			}
			seen[e.EpisodeKey] = true
			after = e.ID
		}
	}
	if len(seen) < entities {
		t.Fatalf("%d effects for %d entities", len(seen), entities)
	}
	r, err := st.EventList(ctx, &store.EventListParams{Source: "shop", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Events {
		if e.Disposition == store.DispositionAccepted {
			t.Fatalf("event %s left pending", e.EventID)
		}
	}
	// Both processes took part.
	var rows []*store.AuditEntry
	for after := int64(0); ; {
		page, err := st.AuditList(ctx, &store.AuditListParams{Action: "work_settled", AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		rows = append(rows, page...)
		after = page[len(page)-1].ID
	}
	checkBusinessOrder(t, rows, revisions)
	actors := map[string]int{}
	for _, row := range rows {
		actors[strings.SplitN(row.Actor, ":", 2)[0]]++
	}
	t.Logf("work settled per worker: %v", actors)
	if len(actors) < 2 {
		t.Errorf("only %d worker(s) settled work; both processes should share it", len(actors))
	}
}

// checkBusinessOrder follows each entity's settlements in commit order (the
// lease serialises an entity's transactions, so audit ids follow it): the
// versions applied rise strictly, every revision settled stale was older
// than one already applied, and the newest revision ends applied.
func checkBusinessOrder(t *testing.T, rows []*store.AuditEntry, newest int) {
	t.Helper()
	applied := map[string]int{}
	for _, a := range rows {
		rest, ok := strings.CutPrefix(a.Detail, "flow orders entity ")
		if !ok {
			t.Fatalf("audit %d: unexpected work_settled detail %q", a.ID, a.Detail)
		}
		entity, outcome, _ := strings.Cut(rest, ": ")
		var rev int
		if _, err := fmt.Sscanf(strings.TrimPrefix(a.EventID, entity+"-"), "r%d", &rev); err != nil {
			t.Fatalf("audit %d: event id %q does not name a revision of %s", a.ID, a.EventID, entity)
		}
		switch {
		case strings.HasPrefix(outcome, "applied "):
			if rev <= applied[entity] {
				t.Errorf("%s: r%d applied after r%d (audit %d)", entity, rev, applied[entity], a.ID)
			}
			applied[entity] = rev
		case strings.HasPrefix(outcome, "stale"):
			if rev >= applied[entity] {
				t.Errorf("%s: r%d settled stale while only r%d was applied (audit %d)", entity, rev, applied[entity], a.ID)
			}
		case strings.HasPrefix(outcome, "duplicate"):
			if rev != applied[entity] {
				t.Errorf("%s: r%d settled duplicate while r%d is applied (audit %d)", entity, rev, applied[entity], a.ID)
			}
		default:
			t.Errorf("%s: r%d settled %s", entity, rev, outcome)
		}
	}
	for entity, rev := range applied {
		if rev != newest {
			t.Errorf("%s: newest applied r%d, want r%d", entity, rev, newest)
		}
	}
}
