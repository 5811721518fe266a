package publish

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
)

// The endpoints' calls run on the delivery workers, as many at once as
// there are workers, and endpoints often share a host: the client keeps a
// connection for each of them between calls instead of dialling a fresh
// one per call beyond its idle limit (the fan-out dialled 4 % of the
// server's CPU away with sixteen).
func TestEndpointCallsReuseTheirConnections(t *testing.T) {
	const workers = 40
	cfg, err := config.Parse("p.yaml", []byte("delivery:\n  workers: 40\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Delivery.Workers != workers {
		t.Fatalf("delivery.workers = %d", cfg.Delivery.Workers)
	}
	var conns atomic.Int64
	var arrived sync.WaitGroup
	var gate atomic.Pointer[chan struct{}]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-*gate.Load() // every call of a round is in flight at once
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	s := New(cfg, nil, Options{})
	client := s.http.Client
	round := func() {
		arrived.Add(workers)
		release := make(chan struct{})
		gate.Store(&release)
		var done sync.WaitGroup
		for range workers {
			done.Go(func() {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			})
		}
		arrived.Wait()
		close(release)
		done.Wait()
	}
	round()
	first := conns.Load()
	round()
	round()
	if n := conns.Load() - first; n != 0 {
		t.Fatalf("two more rounds of %d concurrent calls dialled %d new connections, want none (the first dialled %d)", workers, n, first)
	}
}
