package delivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func post(t *testing.T, s *Server, key, body string, timeout time.Duration) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/charges", bytes.NewReader([]byte(body)))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	_ = json.Unmarshal(b, &a.body)
	return a, nil
}

func get(t *testing.T, s *Server, path string) int {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The Stripe rules: a success is replayed, a saved 500 is replayed, faults
// before execution save nothing, a different body under a used key is
// refused, and a key is forgotten after its window.
func TestIdempotencyLikeStripe(t *testing.T) {
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	s := New(Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour, Now: func() time.Time { return now }})
	defer s.Close()

	s.Script("k1", Fail500, Success, Fail500)
	want := []int{500, 201, 201, 201}
	for i, w := range want {
		a, err := post(t, s, "k1", `{"a":1}`, 5*time.Second)
		if err != nil || a.status != w {
			t.Fatalf("call %d: %d %v, want %d", i+1, a.status, err, w)
		}
	}
	if n := s.Executions("k1"); n != 1 {
		t.Fatalf("k1 executed %d times, want 1", n)
	}
	if a, _ := post(t, s, "k1", `{"a":2}`, 5*time.Second); a.status != 400 || a.body["error"].(map[string]any)["type"] != "idempotency_error" {
		t.Fatalf("reused key with another body: %+v", a)
	}

	s.Script("k2", Fail500Saved, Success)
	for range 3 {
		if a, _ := post(t, s, "k2", `{}`, 5*time.Second); a.status != 500 {
			t.Fatalf("saved 500 not replayed: %d", a.status)
		}
	}
	now = now.Add(24 * time.Hour)
	if a, _ := post(t, s, "k2", `{}`, 5*time.Second); a.status != 201 {
		t.Fatalf("after the window the key is new: %d", a.status)
	}
	if s.Executions("k2") != 1 || s.Calls("k2") != 4 {
		t.Fatalf("k2: executions %d calls %d", s.Executions("k2"), s.Calls("k2"))
	}
	if get(t, s, "/effects/k2") != 200 || get(t, s, "/effects/none") != 404 {
		t.Fatal("lookup by key")
	}
}

// The timeout faults stall until the client gives up; after-work has done
// the work and a resend under the key gets the saved success.
func TestTimeouts(t *testing.T) {
	s := New(Options{IdempotencyHeader: "Idempotency-Key"})
	defer s.Close()
	s.Script("before", TimeoutBeforeWork)
	s.Script("after", TimeoutAfterWork)
	for _, k := range []string{"before", "after"} {
		if _, err := post(t, s, k, `{}`, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: err %v, want a client timeout", k, err)
		}
	}
	if s.Executions("before") != 0 || s.Executions("after") != 1 {
		t.Fatalf("executions before=%d after=%d", s.Executions("before"), s.Executions("after"))
	}
	a, _ := post(t, s, "after", `{}`, 5*time.Second)
	if a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" || s.Executions("after") != 1 {
		t.Fatalf("resend after the work: %+v, executions %d", a, s.Executions("after"))
	}
	if a, _ := post(t, s, "before", `{}`, 5*time.Second); a.status != 201 || s.Executions("before") != 1 {
		t.Fatalf("resend before the work: %+v", a)
	}
}

// Every other fault, and a seeded mix that is the same for the same seed.
func TestFaultsAndMix(t *testing.T) {
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	s := New(Options{Now: func() time.Time { return now }, KeyField: "key"})
	defer s.Close()
	s.Script("x", Fail429Seconds, Fail429Millis, Fail429Date, HiddenFailure, BatchPartial, Fail400)
	for i, w := range []struct {
		status int
		ra     string
	}{{429, "2"}, {429, "1500"}, {429, now.Add(3 * time.Second).Format(http.TimeFormat)}, {200, ""}, {200, ""}, {400, ""}} {
		a, err := post(t, s, "", `{"key":"x"}`, 5*time.Second)
		if err != nil || a.status != w.status || a.header.Get("Retry-After") != w.ra {
			t.Fatalf("call %d: %d %q %v", i+1, a.status, a.header.Get("Retry-After"), err)
		}
	}
	if s.Executions("x") != 1 { // only the batch did work
		t.Fatalf("x executed %d", s.Executions("x"))
	}

	mix := []Weighted{{Success, 5}, {Fail500, 3}, {Fail400, 2}}
	a, b := New(Options{Seed: 7, Mix: mix}), New(Options{Seed: 7, Mix: mix})
	defer a.Close()
	defer b.Close()
	seen := map[Fault]int{}
	for n := 1; n <= 200; n++ {
		fa, fb := a.Draw("key", n), b.Draw("key", n)
		if fa != fb {
			t.Fatalf("draw %d differs under one seed: %v %v", n, fa, fb)
		}
		seen[fa]++
	}
	if len(seen) != 3 {
		t.Fatalf("mix drew %v", seen)
	}
}

// With HangUp the timeout faults drop the connection at once: the client
// gets no answer after writing its request (an unknown outcome) without
// waiting for a timeout, and the work is done or not as the fault says.
func TestHangUp(t *testing.T) {
	s := New(Options{HangUp: true, Stall: time.Hour, IdempotencyHeader: "Idempotency-Key"})
	defer s.Close()
	s.Script("k-after", TimeoutAfterWork)
	s.Script("k-before", TimeoutBeforeWork)
	for key, work := range map[string]int{"k-after": 1, "k-before": 0} {
		// An hour's timeout: only the hang-up can end the call.
		if _, err := post(t, s, key, `{}`, time.Hour); err == nil {
			t.Fatalf("%s: got an answer, want the connection dropped", key)
		}
		if n := s.Executions(key); n != work {
			t.Errorf("%s: executions %d, want %d", key, n, work)
		}
	}
}

// The reset faults cut the connection after reading the whole request:
// the client gets an error, not an answer; after-work has done the work and
// saved it under the key, before-work has done nothing and saved nothing.
func TestResets(t *testing.T) {
	s := New(Options{IdempotencyHeader: "Idempotency-Key"})
	defer s.Close()
	s.Script("before", ResetBeforeWork)
	s.Script("after", ResetAfterWork)
	for _, k := range []string{"before", "after"} {
		if a, err := post(t, s, k, `{}`, 5*time.Second); err == nil {
			t.Fatalf("%s: answered %d, want the connection cut", k, a.status)
		}
	}
	if s.Executions("before") != 0 || s.Executions("after") != 1 {
		t.Fatalf("executions before=%d after=%d", s.Executions("before"), s.Executions("after"))
	}
	if a, _ := post(t, s, "after", `{}`, 5*time.Second); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("resend after the work: %+v", a)
	}
	if a, _ := post(t, s, "before", `{}`, 5*time.Second); a.status != 201 || a.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("resend before the work: %+v", a)
	}
	if got := s.FaultsFor("after"); len(got) != 1 || got[0] != ResetAfterWork {
		t.Fatalf("faults for after: %v", got)
	}
}

// With Hang, a timeout fault calls it and cuts the connection at once
// instead of waiting for the client's deadline.
func TestHang(t *testing.T) {
	var hung atomic.Int32 // the network is no synchronisation to the race detector
	s := New(Options{KeyHeader: "X-Key", Hang: func(*http.Request) { hung.Add(1) }})
	defer s.Close()
	s.Script("k", TimeoutAfterWork, TimeoutBeforeWork)
	for range 2 {
		// A deadline far away: only the cut can end the call in time.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/x", bytes.NewReader([]byte(`{}`)))
		req.Header.Set("X-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			t.Fatalf("answered %d, want the connection cut", resp.StatusCode)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the client timed out: Hang did not cut the call")
		}
	}
	if hung.Load() != 2 || s.Executions("k") != 1 || s.Calls("k") != 2 {
		t.Fatalf("hung %d, executions %d, calls %d; want 2, 1, 2", hung.Load(), s.Executions("k"), s.Calls("k"))
	}
}

// Reset forgets everything and takes new options on the same listener.
func TestReset(t *testing.T) {
	s := New(Options{IdempotencyHeader: "Idempotency-Key"})
	defer s.Close()
	if a, _ := post(t, s, "k", `{}`, 5*time.Second); a.status != 201 {
		t.Fatalf("first call: %d", a.status)
	}
	url := s.URL
	s.Reset(Options{IdempotencyHeader: "Idempotency-Key", Mix: []Weighted{{Fail400, 1}}})
	if s.URL != url || s.Calls("k") != 0 || s.Executions("k") != 0 || len(s.Requests()) != 0 {
		t.Fatalf("after Reset: url %s (was %s), calls %d, executions %d, requests %d",
			s.URL, url, s.Calls("k"), s.Executions("k"), len(s.Requests()))
	}
	// The key is forgotten (no replay of the 201) and the new mix applies.
	if a, _ := post(t, s, "k", `{}`, 5*time.Second); a.status != 400 {
		t.Fatalf("after Reset: %d, want the new mix's 400", a.status)
	}
	if get(t, s, "/effects/k") != 404 {
		t.Fatal("lookup after Reset found the forgotten work")
	}
}

// Quiet waits until every connection a client opened is closed: a request
// the client wrote before it died is logged by then, however late the
// server gets to read it.
func TestQuiet(t *testing.T) {
	s := New(Options{Stall: time.Minute})
	defer s.Close()
	ctx := context.Background()
	if err := s.Quiet(ctx); err != nil {
		t.Fatalf("Quiet with no connection: %v", err)
	}

	// A client that writes its request and vanishes without reading the
	// answer: the server logs it whenever it reads it.
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for s.OpenConns() == 0 {
		time.Sleep(time.Millisecond) // the accept lags the dial
	}
	req := "POST /charges HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	// Held open: Quiet does not return while it is.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := s.Quiet(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Quiet with an open connection = %v, want the deadline", err)
	}
	_ = conn.Close()
	if err := s.Quiet(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Requests()); n != 1 {
		t.Fatalf("%d requests logged once quiet, want 1", n)
	}
	if n := s.OpenConns(); n != 0 {
		t.Fatalf("%d connections open once quiet", n)
	}
}
