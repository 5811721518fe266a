package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/server"
)

// startServer runs the real server of a config file on 127.0.0.1:0 until
// the test ends and returns its base URL. lookup resolves the config's
// ${VAR}s for the server alone.
func startServer(t *testing.T, cfgPath string, lookup map[string]string) string {
	t.Helper()
	ln, base := listenLocal(t)
	startServerOn(t, ln, cfgPath, lookup)
	return base
}

// listenLocal binds 127.0.0.1:0, so a config can name the server's URL
// before it starts.
func listenLocal(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String()
}

func startServerOn(t *testing.T, ln net.Listener, cfgPath string, lookup map[string]string) {
	t.Helper()
	cfg, err := config.Load(cfgPath, func(k string) (string, bool) { v, ok := lookup[k]; return v, ok })
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := server.New(cfg, server.Options{Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v", err)
		}
	})
}

// waitUntil polls cond while the server processes in the background.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // waiting for the processor, not measuring time
	}
}

// waitDisposition waits until the shop event has the disposition, read
// through the events API.
func waitDisposition(t *testing.T, base, eventID, want string) {
	t.Helper()
	env := map[string]string{adminTokenVar: "admin-tok"}
	waitUntil(t, eventID+" to be "+want, func() bool {
		var got api.EventListJSON
		r := &remote{base: mustURL(t, base), token: env[adminTokenVar], client: http.DefaultClient}
		if err := r.call(context.Background(), http.MethodGet, "/api/v1/events", url.Values{"source": {"shop"}, "event_id": {eventID}}, nil, &got); err != nil {
			t.Fatal(err)
		}
		return len(got.Events) == 1 && got.Events[0].Disposition == want
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
