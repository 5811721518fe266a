package receive_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/receive"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/postgres"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// groupStore is what the test needs of a driver: the inbox's commit, the
// receiver's audit, and a read of what was stored.
type groupStore interface {
	inbox.Committer
	receive.Auditor
	EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error)
}

// Rules planted in each database. A delivery of an event whose id starts
// with fail_ fails with an error that is not about its values (SQLite: a
// function error, SQLITE_ERROR; PostgreSQL: class 58, an I/O error), after
// its event row was written in the same submission. An event whose id
// starts with refused_ breaks a constraint: refused for its values.
var groupFaults = map[string][]string{
	"sqlite": {
		`CREATE TRIGGER fail_delivery BEFORE INSERT ON deliveries WHEN NEW.event_id LIKE 'fail\_%' ESCAPE '\'
			BEGIN SELECT json('the disk failed'); END`,
		`CREATE TRIGGER refuse_event BEFORE INSERT ON events WHEN NEW.event_id LIKE 'refused\_%' ESCAPE '\'
			BEGIN SELECT RAISE(ABORT, 'refused by rule'); END`,
	},
	"postgres": {
		`CREATE FUNCTION fail_delivery() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF NEW.event_id LIKE 'fail\_%' THEN RAISE EXCEPTION 'the disk failed' USING ERRCODE = '58030'; END IF;
			RETURN NEW; END $$`,
		`CREATE TRIGGER fail_delivery BEFORE INSERT ON deliveries FOR EACH ROW EXECUTE FUNCTION fail_delivery()`,
		`ALTER TABLE events ADD CONSTRAINT refuse_event CHECK (event_id NOT LIKE 'refused\_%')`,
	},
}

// openGroupStore opens a migrated store of the driver with groupFaults in
// place.
func openGroupStore(t *testing.T, driver string) groupStore {
	t.Helper()
	ctx := context.Background()
	var st interface {
		groupStore
		Migrate(ctx context.Context) ([]string, error)
		Close() error
	}
	var exec func(q string) error
	switch driver {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "group.db")
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		st = s
		exec = func(q string) error {
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = db.ExecContext(ctx, q)
			return err
		}
	case "postgres":
		s, err := postgres.Open(ctx, pgtest.NewDatabase(t), 4)
		if err != nil {
			t.Fatal(err)
		}
		st = s
		exec = func(q string) error { _, err := s.Pool().Exec(ctx, q); return err }
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range groupFaults[driver] {
		if err := exec(q); err != nil {
			t.Fatalf("plant the rule %q: %v", q, err)
		}
	}
	return st
}

// gatedStore holds the first commit after arm until release, so that the
// requests sent meanwhile queue up and share the next group, and records
// the event ids of every group it commits.
type gatedStore struct {
	groupStore
	mu      sync.Mutex
	entered chan struct{} // closed when an armed commit starts waiting
	release chan struct{}
	groups  [][]string
}

func (g *gatedStore) arm() (entered, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	return g.entered, g.release
}

func (g *gatedStore) InboxCommit(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	g.mu.Lock()
	entered, release := g.entered, g.release
	g.entered, g.release = nil, nil
	var ids []string
	for _, s := range p.Submissions {
		for _, d := range s.Deliveries {
			ids = append(ids, d.EventID)
		}
	}
	g.groups = append(g.groups, ids)
	g.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	return g.groupStore.InboxCommit(ctx, p)
}

// groupOf is the group that committed eventID.
func (g *gatedStore) groupOf(eventID string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ids := range g.groups {
		if slices.Contains(ids, eventID) {
			return ids
		}
	}
	return nil
}

// submitted tells the test each time the receiver hands a submission to
// the writer.
type submitted struct {
	receive.Submitter
	calls chan string
}

func (s submitted) Submit(ctx context.Context, sub *store.Submission) (store.SubmissionResult, error) {
	s.calls <- sub.Deliveries[0].EventID
	return s.Submitter.Submit(ctx, sub)
}

// When the store takes some submissions of a group and fails another one
// for a reason that is not its values, the failed one's sender gets 503
// with Retry-After and nothing of it is stored, while the others get what
// their own outcome says: 200 and stored, or 400 when refused for their
// values (WH03: never a 2xx for what is not stored). Both drivers, with
// the real group-commit writer over loopback HTTP.
func TestFailedSubmissionInAGroupIsNotAcknowledged(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			yaml := strings.Replace(baseConfig, "listen:", "receive: {retry_after: 7s}\nlisten:", 1)
			cfg, err := config.Parse("receive.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			st := &gatedStore{groupStore: openGroupStore(t, driver)}
			w := inbox.New(st, inbox.Options{Flushers: 1})
			w.Start()
			t.Cleanup(func() { _ = w.Stop(context.Background()) })
			sub := submitted{Submitter: w, calls: make(chan string, 64)}
			h, err := receive.New(cfg, receive.Options{Writer: sub, Store: st, Clock: clock.NewFake(t0)})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /hooks/{source}", h)
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			r := &rig{t: t, cfg: cfg, srv: srv}

			type answer struct {
				code       int
				retryAfter string
				body       string
			}
			send := func(id string) answer {
				resp, err := http.DefaultClient.Do(r.signed("app", id, swBody(id, "order.created"), nil))
				if err != nil {
					t.Errorf("POST %s: %v", id, err)
					return answer{}
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
			}

			// A round: one request holds the writer at the gate, the
			// round's requests queue behind it, the gate opens and they
			// commit as one group. A request that reaches the queue only
			// after the gate opened may commit alone; a round in which
			// the failing one did is played again with new ids.
			var stored []string
			grouped := false
			for round := 0; round < 5 && !grouped; round++ {
				ids := []string{fmt.Sprintf("ok_%d_a", round), fmt.Sprintf("fail_%d", round),
					fmt.Sprintf("ok_%d_b", round), fmt.Sprintf("refused_%d", round), fmt.Sprintf("ok_%d_c", round)}
				entered, release := st.arm()
				first := make(chan answer, 1)
				go func() { first <- send(fmt.Sprintf("ok_%d_first", round)) }()
				<-sub.calls
				<-entered
				answers := make([]answer, len(ids))
				var wg sync.WaitGroup
				for i, id := range ids {
					wg.Add(1)
					go func() { defer wg.Done(); answers[i] = send(id) }()
				}
				for range ids {
					<-sub.calls
				}
				close(release)
				wg.Wait()
				if a := <-first; a.code != http.StatusOK {
					t.Fatalf("round %d: the request at the gate got %d %s", round, a.code, a.body)
				}
				stored = append(stored, fmt.Sprintf("ok_%d_first", round))
				for i, id := range ids {
					a := answers[i]
					switch {
					case strings.HasPrefix(id, "fail_"):
						if a.code != http.StatusServiceUnavailable || a.retryAfter != "7" || !strings.Contains(a.body, "retry later") {
							t.Errorf("%s, failed by the store: %d (Retry-After %q) %s, want 503 with Retry-After 7", id, a.code, a.retryAfter, a.body)
						}
					case strings.HasPrefix(id, "refused_"):
						if a.code != http.StatusBadRequest || a.retryAfter != "" {
							t.Errorf("%s, refused for its values: %d (Retry-After %q) %s, want 400", id, a.code, a.retryAfter, a.body)
						}
					default:
						if a.code != http.StatusOK || !strings.Contains(a.body, `"stored"`) {
							t.Errorf("%s: %d %s, want 200 stored", id, a.code, a.body)
						}
						stored = append(stored, id)
					}
				}
				group := st.groupOf(ids[1])
				grouped = slices.Contains(group, ids[0]) || slices.Contains(group, ids[2]) || slices.Contains(group, ids[4])
			}
			if !grouped {
				t.Fatalf("in no round did the failing submission share a group with one that succeeded: %v", st.groups)
			}

			res, err := st.EventList(context.Background(), &store.EventListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range res.Events {
				got = append(got, e.EventID)
			}
			slices.Sort(got)
			slices.Sort(stored)
			if !slices.Equal(got, stored) {
				t.Fatalf("stored %v, want exactly the acknowledged %v", got, stored)
			}
		})
	}
}
