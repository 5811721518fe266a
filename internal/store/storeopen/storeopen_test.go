package storeopen

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// Each scheme chooses its driver, and the driver says how many group
// commits the inbox writer runs on it.
func TestForChoosesTheDriverByScheme(t *testing.T) {
	for _, tc := range []struct {
		url, driver string
		flushers    int
	}{
		{"sqlite:./data/h.db", "sqlite", 2},
		{"sqlite:/abs/h.db", "sqlite", 2},
		{"postgres://u@h:5432/db", "postgres", 2},
		{"postgresql://u:pw@h/db?sslmode=disable", "postgres", 2},
	} {
		d, err := For(tc.url)
		if err != nil {
			t.Fatalf("For(%q): %v", tc.url, err)
		}
		if d.Name != tc.driver || d.Flushers != tc.flushers {
			t.Errorf("For(%q) = %s with %d flushers, want %s with %d", tc.url, d.Name, d.Flushers, tc.driver, tc.flushers)
		}
	}
}

// A URL no driver takes is named (its password hidden) with the forms
// that work; a driver's own rule is checked beyond the scheme.
func TestCheckNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"mysql://x", `"mysql://x" is not supported: use sqlite:PATH or postgres://user@host:port/db`},
		{"mysql://app:s3cret@db/x", `"mysql://app:xxxxx@db/x" is not supported: use sqlite:PATH or postgres://user@host:port/db`},
		{"SQLITE:./h.db", `"SQLITE:./h.db" is not supported`},
		{"postgres:/h/db", `"postgres:/h/db" is not supported`},
		{"", `"" is not supported`},
		{"sqlite:", "sqlite: needs a file path, for example sqlite:./data/hookledger.db"},
	} {
		err := Check(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %v, want %q", tc.url, err, tc.want)
		}
	}
	for _, ok := range []string{"sqlite:h.db", "postgres://u@h/db", "postgresql://h/db"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
}

// Open opens the driver the URL chooses, and refuses what none takes
// without touching anything.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = Open(ctx, "mysql://app:s3cret@db/x")
	if st != nil || err == nil {
		t.Fatalf("Open(mysql) = %v, %v; want an error and no store", st, err)
	}
	if want := `open store: "mysql://app:xxxxx@db/x" is not supported`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Open(mysql) error %q, want it to start with %q", err, want)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@h:5432/db": "postgres://app:xxxxx@h:5432/db",
		"postgres://app@h/db":             "postgres://app@h/db",
		"postgres://h/db":                 "postgres://h/db",
		"sqlite:./h.db":                   "sqlite:./h.db",
		"postgres://a:b:c@d@h/db":         "postgres://a:xxxxx@h/db",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// OpenReadOnly and OpenExisting never create a database: a file that is
// not there is fs.ErrNotExist, named by its path, and stays absent. A
// store opened read-only refuses writes.
func TestOpenWithoutCreating(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "h.db")
	for name, open := range map[string]func(context.Context, string) (store.Store, error){"OpenReadOnly": OpenReadOnly, "OpenExisting": OpenExisting} {
		_, err := open(ctx, "sqlite:"+path)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no database at "+path) {
			t.Errorf("%s of a missing file: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "sub")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s created the directory: %v", name, err)
		}
	}
	st, err := Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	ro, err := OpenReadOnly(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.ProbeWrite(ctx, time.Now()); err == nil {
		t.Error("a store opened read-only wrote")
	}
}

// Resolve makes a relative sqlite path absolute under the directory given
// and leaves every other URL as it is.
func TestResolve(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"sqlite:./data/h.db", "sqlite:/srv/hl/data/h.db"},
		{"sqlite:h.db", "sqlite:/srv/hl/h.db"},
		{"sqlite:/abs/h.db", "sqlite:/abs/h.db"},
		{"sqlite::memory:", "sqlite::memory:"},
		{"sqlite:", "sqlite:"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"mysql://x", "mysql://x"},
	} {
		if got := Resolve(tc.url, "/srv/hl"); got != tc.want {
			t.Errorf("Resolve(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// heldFirstCommit wraps a real store and holds its first inbox commit
// until released; every commit it is handed is announced on entered.
type heldFirstCommit struct {
	store.Store
	mu      sync.Mutex
	calls   int
	entered chan int
	release chan struct{}
}

func (h *heldFirstCommit) InboxCommit(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	h.entered <- n
	if n == 1 {
		<-h.release
	}
	return h.Store.InboxCommit(ctx, p)
}

// On SQLite the inbox hands a group to the store while an earlier group's
// commit is still under way: the one writer's transaction is shared, so
// the later group joins it or the next one. With the driver's flushers at
// one, webhooks arriving meanwhile waited for that commit before they
// were even handed over, and so for one commit more.
func TestSQLiteInboxHandsOverAGroupWhileOneCommits(t *testing.T) {
	d, err := For("sqlite:./h.db")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	h := &heldFirstCommit{Store: st, entered: make(chan int, 2), release: make(chan struct{})}
	w := inbox.New(h, inbox.Options{Flushers: d.Flushers})
	w.Start()
	defer w.Stop(ctx)

	sub := func(id string) *store.Submission {
		return &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: "r-" + id, Source: "stripe", EventID: id, Type: "invoice.paid",
			ReceivedAt: time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC), Body: []byte("{}"),
		}}}
	}
	errs := make(chan error, 2)
	submit := func(id string) {
		res, err := w.Submit(ctx, sub(id))
		if err == nil {
			err = res.Err
		}
		errs <- err
	}
	go submit("evt_first")
	<-h.entered
	go submit("evt_second")
	select {
	case n := <-h.entered:
		if n != 2 {
			t.Fatalf("commit %d handed over, want the second", n)
		}
	case <-time.After(time.Minute): // a liveness bound, not a timing: the hand-over takes microseconds
		close(h.release)
		t.Fatalf("the second webhook's group was not handed to the store while the first group's commit was under way (%d flushers)", d.Flushers)
	}
	close(h.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	r, err := st.EventList(ctx, &store.EventListParams{Limit: 10})
	if err != nil || len(r.Events) != 2 {
		t.Fatalf("stored %d events (%v), want both", len(r.Events), err)
	}
}
