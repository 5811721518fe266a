package publish

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// t0 is when every test's fake clock starts.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// eachStore runs fn on a fresh SQLite file, then on a fresh PostgreSQL
// database (last: without a server that part skips, or fails under CI).
func eachStore(t *testing.T, fn func(t *testing.T, storeURL string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteURLOf(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, pgtest.NewDatabase(t)) })
}

// env is a publishing service on a real store with the delivery worker
// that carries its messages out, both on one fake clock. The worker's
// loop is not started: a test delivers what is due with drain.
type env struct {
	t   *testing.T
	ctx context.Context
	st  store.Store
	clk *clock.Fake
	cfg *config.Config
	s   *Service
	w   *deliver.Worker
	reg *prometheus.Registry

	mu    sync.Mutex
	notes []deliver.Notification
	wakes int
}

// newEnv opens storeURL, applies the schema and builds the service and the
// worker from the config yaml.
func newEnv(t *testing.T, storeURL, yaml string) *env {
	t.Helper()
	ctx := context.Background()
	st, err := storeopen.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return build(t, st, clock.NewFake(t0), yaml)
}

// newEnvOn starts publishing again on e's store and clock with the config
// yaml: a restart, or a second process on the same database.
func newEnvOn(t *testing.T, e *env, yaml string) *env { return build(t, e.st, e.clk, yaml) }

// build makes the service and the worker and starts the service as Start
// does, without its loop.
func build(t *testing.T, st store.Store, clk *clock.Fake, yaml string) *env {
	t.Helper()
	ctx := context.Background()
	cfg, err := config.Parse("p.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, st: st, clk: clk, cfg: cfg, reg: prometheus.NewRegistry()}
	e.s = New(cfg, st, Options{Clock: e.clk, Registerer: e.reg,
		Wake: func() { e.mu.Lock(); e.wakes++; e.mu.Unlock() },
		Notify: func(n deliver.Notification) {
			e.mu.Lock()
			e.notes = append(e.notes, n)
			e.mu.Unlock()
		}})
	e.w, err = deliver.New(cfg, st, deliver.Options{Clock: e.clk, Actions: e.s.Actions(), Runtime: e.s,
		Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// drain delivers every effect due now.
func (e *env) drain() {
	e.t.Helper()
	if err := e.w.Drain(e.ctx); err != nil {
		e.t.Fatalf("deliver: %v", err)
	}
}

// create makes an endpoint through the service, as the admin API does.
func (e *env) create(id, url string, types ...string) *store.Endpoint {
	e.t.Helper()
	yes := true
	in := &EndpointInput{ID: &id, URL: &url, AllowPrivateNetworks: &yes}
	if types != nil {
		in.Types = &types
	}
	ep, err := e.s.Create(e.ctx, in, "test")
	if err != nil {
		e.t.Fatalf("create endpoint %s: %v", id, err)
	}
	return ep
}

// publish publishes a message of typ under key and returns its id.
func (e *env) publish(key, typ, data string) *Result {
	e.t.Helper()
	m, fp, err := DecodeMessage([]byte(fmt.Sprintf(`{"type":%q,"data":%s}`, typ, data)))
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.s.Publish(e.ctx, key, fp, m, "test")
	if err != nil {
		e.t.Fatalf("publish %s: %v", key, err)
	}
	return res
}

// effects lists an endpoint's deliveries, in id order; states filter.
func (e *env) effects(endpointID string, states ...store.EffectState) []*store.Effect {
	e.t.Helper()
	list, err := e.st.EffectList(e.ctx, &store.EffectListParams{Destination: store.EndpointDestination(endpointID),
		States: states, Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

// stored reads an endpoint from the store.
func (e *env) stored(id string) *store.Endpoint {
	e.t.Helper()
	ep, err := e.st.EndpointGet(e.ctx, id)
	if err != nil || ep == nil {
		e.t.Fatalf("endpoint %s: %v, %v", id, ep, err)
	}
	return ep
}

// counter reads one of the service's counters.
func (e *env) counter(c prometheus.Counter) float64 {
	e.t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		e.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// received is one request an endpoint got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is an endpoint on loopback that records what it receives and
// answers the status it is set to.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	status int
	header http.Header // set on every answer
	got    []received
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{status: http.StatusNoContent, header: http.Header{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{header: req.Header.Clone(), body: b})
		status := r.status
		for k, v := range r.header {
			w.Header()[k] = v
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setStatus(s int) {
	r.mu.Lock()
	r.status = s
	r.mu.Unlock()
}

// setHeader sets a header of every answer ("" removes it).
func (r *receiver) setHeader(k, v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == "" {
		r.header.Del(k)
		return
	}
	r.header.Set(k, v)
}

func (r *receiver) deliveries() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// ids are the webhook-ids of what r received, in order.
func (r *receiver) ids() []string {
	var out []string
	for _, d := range r.deliveries() {
		out = append(out, d.header.Get("webhook-id"))
	}
	return out
}

func sqliteURLOf(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "p.db") }

func (e *env) wakeCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.wakes
}

// messages lists the published messages (events of source publish), in
// the order they were stored.
func (e *env) messages() []*store.Event {
	e.t.Helper()
	res, err := e.st.EventList(e.ctx, &store.EventListParams{Source: store.PublishSource, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Events
}

func (e *env) notifications() []deliver.Notification {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]deliver.Notification(nil), e.notes...)
}
