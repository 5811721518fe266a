package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

const crashSecret = "whsec_crash_test_secret"

// buildBinary compiles the real hookledger binary for process-level tests.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hookledger")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan error
	logs *bytes.Buffer
	mu   *sync.Mutex // guards logs while the process runs
}

// logText is what the process has logged so far.
func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

var servingRe = regexp.MustCompile(`msg="hookledger serving" addr=(\S+)`)

// startBinary runs `hookledger serve` and waits for its listening address;
// env adds VAR=value settings to the inherited environment.
func startBinary(t *testing.T, bin, cfg string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1), logs: &bytes.Buffer{}, mu: &sync.Mutex{}}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingRe.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.addr = <-addr:
	case err := <-p.done:
		t.Fatalf("hookledger exited before serving: %v\n%s", err, p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("hookledger did not start serving\n%s", p.logText())
	}
	return p
}

type load struct {
	round   string   // keeps event ids of different rounds apart
	acked   sync.Map // event id -> struct{}
	nAcked  atomic.Int64
	refused atomic.Int64
	// storeFails: one request in 50 sends an event whose store write
	// fails (failDeliveryTrigger); it must be answered 503 with
	// Retry-After, never 2xx. failed counts those answers.
	storeFails bool
	failed     atomic.Int64
}

// failDeliveryTrigger makes the database fail the delivery of an event
// whose id starts with evt_fail_, with an error that is not about its
// values (SQLITE_ERROR): a submission the store did not take, in a group
// whose others it takes.
const failDeliveryTrigger = `CREATE TRIGGER fail_delivery BEFORE INSERT ON deliveries
	WHEN NEW.event_id LIKE 'evt\_fail\_%' ESCAPE '\' BEGIN SELECT json('the disk failed'); END`

// drive sends signed webhooks from n clients until stop is closed; every
// tenth request carries a bad signature and must never be stored.
func (l *load) drive(t *testing.T, base string, clients int, stop <-chan struct{}) *sync.WaitGroup {
	scheme, err := signature.New(signature.Options{Kind: "stripe", Secrets: []string{crashSecret}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				bad := i%10 == 9
				fail := l.storeFails && i%50 == 24
				id := fmt.Sprintf("evt_%s_c%d_%d", l.round, c, i)
				if bad {
					id = fmt.Sprintf("evt_bad_%s_c%d_%d", l.round, c, i)
				} else if fail {
					id = fmt.Sprintf("evt_fail_%s_c%d_%d", l.round, c, i)
				}
				body := []byte(fmt.Sprintf(`{"id":%q,"type":"invoice.paid","created":1762160000,"data":{"object":{"id":"in_%d"}}}`, id, i))
				h, err := scheme.Sign(&signature.Request{Method: "POST", Body: body}, time.Now(), "")
				if err != nil {
					t.Error(err)
					return
				}
				if bad {
					h.Set("Stripe-Signature", strings.Replace(h.Get("Stripe-Signature"), "v1=", "v1=00", 1))
				}
				req, _ := http.NewRequest("POST", base+"/hooks/stripe", bytes.NewReader(body))
				req.Header = h
				resp, err := client.Do(req)
				if err != nil {
					continue // the server died mid-request: not acknowledged
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if fail && (resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "") {
					t.Errorf("%s, which the store failed, was answered %d (Retry-After %q), want 503 with Retry-After",
						id, resp.StatusCode, resp.Header.Get("Retry-After"))
				} else if fail {
					l.failed.Add(1)
				}
				if resp.StatusCode/100 == 2 {
					if bad {
						t.Errorf("bad signature acknowledged for %s", id)
					}
					l.acked.Store(id, struct{}{})
					l.nAcked.Add(1)
				} else {
					l.refused.Add(1)
				}
			}
		}()
	}
	return &wg
}

func storedIDs(t *testing.T, dbPath string) map[string]bool {
	t.Helper()
	s, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := map[string]bool{}
	after := int64(0)
	for {
		r, err := s.EventList(context.Background(), &store.EventListParams{AfterPK: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			ids[e.EventID] = true
		}
		if r.NextAfterPK == 0 {
			return ids
		}
		after = r.NextAfterPK
	}
}

func (l *load) check(t *testing.T, stored map[string]bool) {
	t.Helper()
	missing := 0
	l.acked.Range(func(k, _ any) bool {
		if !stored[k.(string)] {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged event %s is not in the store", k)
			}
		}
		return true
	})
	for id := range stored {
		if strings.HasPrefix(id, "evt_bad_") {
			t.Errorf("event %s with a bad signature was stored", id)
		}
		if strings.HasPrefix(id, "evt_fail_") {
			t.Errorf("event %s, whose store write failed, was stored", id)
		}
	}
	if l.storeFails && l.failed.Load() == 0 {
		t.Errorf("no request whose store write fails was answered: the round did not test them")
	}
	t.Logf("acknowledged %d, stored %d, missing %d, refused %d (failed by the store %d)", l.nAcked.Load(), len(stored), missing, l.refused.Load(), l.failed.Load())
}

func waitAcked(t *testing.T, l *load, n int64, p *proc) {
	t.Helper()
	// Generous: on a busy 2-core machine the load shares the processors
	// with the server; only a server that stopped acknowledging reaches it.
	deadline := time.Now().Add(3 * time.Minute)
	for l.nAcked.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d acknowledgements after 3 minutes: the server stopped acknowledging\n%s", l.nAcked.Load(), n, p.logText())
		}
		time.Sleep(5 * time.Millisecond) // polling progress, not measuring time
	}
}

// Every event that got a 2xx survives kill -9; nothing unverified is stored;
// an event whose store write fails in a group that commits is answered 503
// and never stored; the restarted process serves again; SIGTERM under load
// drains and exits 0.
func TestCrashKeepsEveryAcknowledgedEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test skipped in -short mode")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "crash.db")
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
store: sqlite:%s
sources:
  - name: stripe
    kind: stripe
    secrets: [%s]
`, db, crashSecret)), 0o600); err != nil {
		t.Fatal(err)
	}

	// The database fails the writes of some events (failDeliveryTrigger).
	if out, err := exec.Command(bin, "migrate", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	plant, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plant.Exec(failDeliveryTrigger); err != nil {
		t.Fatal(err)
	}
	plant.Close()

	// Round 1: kill -9 mid-stream.
	p := startBinary(t, bin, cfg)
	l := &load{round: "r1", storeFails: true}
	stop := make(chan struct{})
	wg := l.drive(t, "http://"+p.addr, 16, stop)
	waitAcked(t, l, 1500, p)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	close(stop)
	wg.Wait()
	l.check(t, storedIDs(t, db))

	// Round 2: the restarted process recovers the same file and serves;
	// SIGTERM under load drains in-flight requests and exits 0.
	p = startBinary(t, bin, cfg)
	l2 := &load{round: "r2", storeFails: true}
	stop = make(chan struct{})
	wg = l2.drive(t, "http://"+p.addr, 16, stop)
	waitAcked(t, l2, 500, p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("SIGTERM: %v, want exit 0\n%s", err, p.logText())
	}
	close(stop)
	wg.Wait()
	stored := storedIDs(t, db)
	l2.check(t, stored)
	l.check(t, stored)
}
