package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// startOnHostClock runs a server with no injected clock on a host clock
// that is wrong by skew, as a production process on a badly set host.
func startOnHostClock(t *testing.T, storeURL string, skew time.Duration) *harness {
	t.Helper()
	cfg, err := config.Parse("e2e.yaml", []byte(testConfig(storeURL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	srv := New(cfg, Options{HostClock: clock.Shifted{Base: clock.Real{}, By: skew}, Listener: ln,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v, want a clean stop", err)
		}
	})
	return &harness{t: t, base: "http://" + srv.Addr(), cfg: cfg, logs: logs, client: &http.Client{Transport: openapitest.Transport(t, nil)}}
}

// receivedAt posts one signed event and returns the received_at the
// server stamped on it.
func (h *harness) receivedAt(eventID string) time.Time {
	h.t.Helper()
	body := []byte(`{"delivery_key":"` + eventID + `","action":"opened"}`)
	m := hmac.New(sha256.New, []byte(githubKey))
	m.Write(body)
	hdr := http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(m.Sum(nil))}}
	if code, resp, _ := h.post("/hooks/github", body, hdr); code != 200 {
		h.t.Fatalf("POST: %d %s", code, resp)
	}
	ev := h.events("github", eventID)
	if len(ev) != 1 {
		h.t.Fatalf("%d events for %s", len(ev), eventID)
	}
	at, err := time.Parse(time.RFC3339Nano, ev[0].ReceivedAt)
	if err != nil {
		h.t.Fatal(err)
	}
	return at
}

func near(a, b time.Time, within time.Duration) bool {
	d := a.Sub(b)
	return d <= within && d >= -within
}

// On PostgreSQL a process whose host clock is ten minutes ahead still
// stamps the database's time: the server follows the database's clock when
// no clock is injected, says so at warn, and exports the offset.
func TestServerFollowsTheDatabaseClockOnPostgres(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	const skew = 10 * time.Minute
	h := startOnHostClock(t, dbURL, skew)
	at := h.receivedAt("clock-1")

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var dbNow time.Time
	if err := conn.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if !near(at, dbNow, 2*time.Second) {
		t.Fatalf("received_at %v, want the database's time %v (the host clock says %v)", at, dbNow, time.Now().Add(skew))
	}

	if !strings.Contains(h.logs.String(), "level=WARN msg=\"this host's clock differs from the database's") {
		t.Errorf("no warning about a host clock 10 minutes off:\n%s", h.logs)
	}
	code, metrics := h.get("/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	var offset float64
	for _, line := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(line, "hookledger_clock_offset_seconds "); ok {
			if _, err := fmt.Sscan(v, &offset); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := -skew.Seconds(); offset > want+2 || offset < want-2 {
		t.Errorf("hookledger_clock_offset_seconds = %v, want about %v", offset, want)
	}
}

// SQLite has one process, so its host's clock is the only one: a skewed
// host clock is what the server stamps, and no offset is exported.
func TestServerKeepsTheHostClockOnSQLite(t *testing.T) {
	const skew = 10 * time.Minute
	h := startOnHostClock(t, sqliteURL(t), skew)
	at := h.receivedAt("clock-1")
	if !near(at, time.Now().Add(skew), 2*time.Second) {
		t.Fatalf("received_at %v, want the host clock %v", at, time.Now().Add(skew))
	}
	_, metrics := h.get("/metrics", "")
	if strings.Contains(string(metrics), "hookledger_clock_offset_seconds") {
		t.Error("SQLite server exports a database clock offset")
	}
}
