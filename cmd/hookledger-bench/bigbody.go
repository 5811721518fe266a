package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hookledger/hookledger/internal/bodyview"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signature"
)

type bigbodyFlags struct {
	hookledger, module, dir string
	repeat                  int
	table                   bool
}

func runBigbody(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "bigbody", "bigbody [--repeat 5] [--hookledger BIN] [flags]",
		"The console's memory while it shows the largest body the receiver accepts.\n"+
			"For each body, a fresh 'hookledger serve' (SQLite) receives one signed event whose\n"+
			"flow copies the body's object into the entity's state and into an effect's\n"+
			"request; once the effect is done, the console is logged in and every page that\n"+
			"shows that body is requested --repeat times (the event, its entity, its effect),\n"+
			"then the raw bytes of each. After each step the server's peak RSS (VmHWM, from\n"+
			"/proc) is read. The bodies: a Stripe invoice event of 2 KB (the baseline of\n"+
			"the same run), the largest the console pretty-prints (64 KB of JSON), and\n"+
			"receive.max_body_bytes' default, 1 MiB, holding two arrays nested 9,990 deep\n"+
			"(the shape whose indentation once grew with the square of its depth).\n"+
			"Exit 1 when a page does not answer 200, or answers more than the console's page\n"+
			"budget. A server without the raw-bytes routes is measured on its pages only.")
	var f bigbodyFlags
	fs.IntVar(&f.repeat, "repeat", 5, "requests per page")
	fs.StringVar(&f.hookledger, "hookledger", "", "prebuilt hookledger `binary` (default: go build ./cmd/hookledger from --module into the temp dir)")
	fs.StringVar(&f.module, "module", ".", "hookledger module `directory` to build from")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir (default the system temp dir)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	if f.repeat < 1 {
		fmt.Fprintln(stderr, "hookledger-bench bigbody: --repeat must be positive")
		return exitUsage
	}
	return benchExit(stderr, "bigbody")(bigbodyBench(ctx, stdout, stderr, &f))
}

// bigbodyCase is one body the console is measured showing.
type bigbodyCase struct {
	name string
	body func(eventID string, created time.Time) []byte
}

// bigbodyPageMost is the console's page budget: a page larger than this
// means the budget is not kept.
const bigbodyPageMost = 8 << 20

func bigbodyCases() []bigbodyCase {
	return []bigbodyCase{
		{"Stripe invoice, 2 KB (baseline)", func(id string, t time.Time) []byte { return stripeBody(id, "in_bench", t) }},
		{"largest pretty-printed", prettyMaxBody},
		{"1 MiB, two arrays 9,990 deep", deepMaxBody},
	}
}

// invoiceEnvelope wraps an invoice object, given as JSON, in a Stripe
// event.
func invoiceEnvelope(id string, created time.Time, object string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"invoice.paid","created":%d,"data":{"object":%s}}`,
		id, created.Unix(), object)
}

// prettyMaxBody is an invoice with as many line items as keep it within
// the console's pretty-printing bounds: the largest body it indents.
func prettyMaxBody(id string, created time.Time) []byte {
	const item = `{"id":"il_%06d","object":"line_item","amount":4900,"currency":"eur","description":"1 x Team plan (at EUR 49.00 / month)","period":{"end":1735689600,"start":1733011200},"quantity":1,"type":"subscription"}`
	var last []byte
	for n := 1; ; n++ {
		var items []string
		for i := range n {
			items = append(items, fmt.Sprintf(item, i))
		}
		b := invoiceEnvelope(id, created, `{"id":"in_bench","object":"invoice","status":"paid","lines":{"object":"list","data":[`+
			strings.Join(items, ",")+`]}}`)
		if !bodyview.Render(b).Pretty {
			return last
		}
		last = b
	}
}

// deepMaxBody is an invoice of exactly the default body limit whose
// object holds two arrays nested 9,990 deep and a padding string.
func deepMaxBody(id string, created time.Time) []byte {
	deep := strings.Repeat("[", 9990) + strings.Repeat("]", 9990)
	head := invoiceEnvelope(id, created, `{"id":"in_bench","object":"invoice","status":"paid","d0":`+deep+`,"d1":`+deep+`,"pad":"@"}`)
	pad := strings.Repeat("x", config.DefaultMaxBodyBytes-len(head)+1)
	return bytes.Replace(head, []byte(`"pad":"@"`), []byte(`"pad":"`+pad+`"`), 1)
}

// bigbodyStep is one page (or raw download) measured on one server.
type bigbodyStep struct {
	name   string
	bytes  int
	most   time.Duration // the slowest of the repeats
	hwmKiB int64         // the server's peak RSS after the step
	// died is how the server ended during the step, if it did: hwmKiB is
	// then the last peak sampled before.
	died string
}

// hwmSampler reads a server's peak RSS every few milliseconds, so that
// the peak is known also when the server dies before it can be asked.
type hwmSampler struct {
	pid  int
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func startHWMSampler(pid int) *hwmSampler {
	h := &hwmSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			h.read()
			select {
			case <-h.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return h
}

// read takes a reading now and returns the highest peak seen.
func (h *hwmSampler) read() int64 {
	if _, hwm, err := readRSS(h.pid); err == nil && hwm > h.peak.Load() {
		h.peak.Store(hwm)
	}
	return h.peak.Load()
}

func (h *hwmSampler) close() {
	close(h.stop)
	<-h.done
}

type bigbodyResult struct {
	name      string
	size      int
	ingestKiB int64 // peak RSS once the event's effect is done
	steps     []bigbodyStep
	rawMissed bool
	eventPage string
}

func bigbodyBench(ctx context.Context, stdout, stderr io.Writer, f *bigbodyFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-bigbody-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	env := &receiveEnv{stderr: stderr, hookledger: f.hookledger, dir: dir}
	if env.hookledger == "" {
		env.hookledger = filepath.Join(dir, "hookledger")
		fmt.Fprintf(stderr, "building hookledger from %s...\n", f.module)
		build := exec.CommandContext(ctx, "go", "build", "-o", env.hookledger, "./cmd/hookledger")
		build.Dir = f.module
		if out, err := build.CombinedOutput(); err != nil {
			return false, fmt.Errorf("go build ./cmd/hookledger: %w\n%s", err, out)
		}
	}
	env.secret = "whsec_" + randomHex(24)
	env.token = randomHex(24)
	if env.scheme, err = signature.New(signature.Options{Kind: signature.KindStripe, Secrets: []string{env.secret}}); err != nil {
		return false, fmt.Errorf("stripe signer: %w", err)
	}
	destURL, closeDest, err := startOKSink()
	if err != nil {
		return false, err
	}
	defer closeDest()
	ok := true
	var results []*bigbodyResult
	for i, c := range bigbodyCases() {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("interrupted: %w", err)
		}
		res, cellOK, err := bigbodyCell(ctx, env, f, c, fmt.Sprintf("case%d", i), destURL)
		if err != nil {
			return false, fmt.Errorf("%s: %w", c.name, err)
		}
		fmt.Fprintf(stderr, "%s: peak RSS %s MiB after ingest, %s MiB after the pages\n", c.name, mib(res.ingestKiB), mib(res.steps[len(res.steps)-1].hwmKiB))
		ok = ok && cellOK
		results = append(results, res)
	}
	printBigbody(stdout, f, results)
	if f.table {
		printHeadlines(stdout, "bigbody", bigbodyHeadlines(results))
	}
	return ok, nil
}

// bigbodyPages is how many of a case's steps are console pages; the
// steps after them are the raw downloads.
const bigbodyPages = 3

// bigbodyHeadlines are each body's peak RSS once every page and download
// was served, beside the first body's (the 2 KB baseline), with the
// largest page against the console's page budget.
func bigbodyHeadlines(results []*bigbodyResult) []headline {
	var rows []headline
	var base int64
	for i, r := range results {
		peak, largest, died := r.ingestKiB, 0, false
		for j, s := range r.steps {
			peak = max(peak, s.hwmKiB)
			died = died || s.died != ""
			if j < bigbodyPages {
				largest = max(largest, s.bytes)
			}
		}
		h := headline{
			figure: fmt.Sprintf("%s: server peak RSS after every page", r.name),
			value: fmt.Sprintf("%s MiB (%s after ingest); body %s bytes, largest page %s bytes",
				mib(peak), mib(r.ingestKiB), num(float64(r.size)), num(float64(largest))),
			goal: fmt.Sprintf("every page within %d MiB: %s", bigbodyPageMost>>20,
				verdict(!died && largest <= bigbodyPageMost && len(r.steps) >= bigbodyPages)),
		}
		if i == 0 {
			base = peak
		} else if base > 0 {
			h.baseline = fmt.Sprintf("%s: %s MiB", results[0].name, mib(base))
			h.ratio = ratioOf(float64(peak), float64(base)) + "x the baseline"
		}
		rows = append(rows, h)
	}
	return rows
}

// startOKSink is a destination that answers every call 200.
func startOKSink() (string, func(), error) {
	return startSinkHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
}

func bigbodyConfig(path, storeURL, token, secret, destURL string) error {
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %q
admin:
  token: %q
sources:
  - name: stripe
    kind: stripe
    secrets: [%q]
destinations:
  - name: loopback
    base_url: %q
    allow_private_networks: true          # the destination listens on loopback
    timeout: 10s
    idempotency: {header: Idempotency-Key, window: 24h}
flows:
  - name: invoices
    source: stripe
    events: ["invoice.*"]
    entity: event.data.object.id
    version:
      mode: revision
      revision: event.created
    state: event.data.object              # the whole object: the entity page shows it
    effects:
      - name: record_payment
        destination: loopback
        request:
          path: '"/payments"'
          body: event.data.object         # the whole object: the effect page shows it
`, storeURL, token, secret, destURL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

var rawDeliveryLink = regexp.MustCompile(`href="(/deliveries/\d+/body)"`)

// bigbodyCell serves one body on a fresh server and measures its pages.
func bigbodyCell(ctx context.Context, env *receiveEnv, f *bigbodyFlags, c bigbodyCase, label, destURL string) (res *bigbodyResult, ok bool, err error) {
	cfgPath := filepath.Join(env.dir, label+".yaml")
	if err := bigbodyConfig(cfgPath, "sqlite:"+filepath.Join(env.dir, label+".db"), env.token, env.secret, destURL); err != nil {
		return nil, false, err
	}
	srv, err := startChild(ctx, "hookledger serve ("+label+")", env.hookledger,
		[]string{"serve", "--config", cfgPath, "--log-format", "json"}, filepath.Join(env.dir, label+".log"))
	if err != nil {
		return nil, false, err
	}
	died := false
	defer func() {
		// A server that died of a page has said so in the results.
		if serr := srv.stop(); !died {
			err = errors.Join(err, serr)
		}
	}()
	base := "http://" + srv.addr
	if err := waitReady(ctx, base+"/readyz"); err != nil {
		return nil, false, err
	}
	hwm := startHWMSampler(srv.cmd.Process.Pid)
	defer hwm.close()
	eventID := "evt_" + randomHex(8)
	body := c.body(eventID, time.Now())
	res = &bigbodyResult{name: c.name, size: len(body)}
	effectID, err := bigbodyIngest(ctx, env, base, eventID, body)
	if err != nil {
		return nil, false, err
	}
	res.ingestKiB = hwm.read()
	client, err := consoleLogin(ctx, base, env.token)
	if err != nil {
		return nil, false, err
	}
	state := url.Values{"flow": {"invoices"}, "entity": {"in_bench"}}.Encode()
	ok = true
	steps := []struct{ name, path string }{
		{"event page", "/event?" + url.Values{"source": {"stripe"}, "event_id": {eventID}}.Encode()},
		{"entity page", "/entity?" + state},
		{"effect page", fmt.Sprintf("/effects/%d", effectID)},
		// The raw bytes' addresses, when the event page links to them.
		{"raw body", ""},
		{"raw state", "/entity/state?" + state},
		{"raw request", fmt.Sprintf("/effects/%d/request", effectID)},
	}
	for i, p := range steps {
		if p.path == "" {
			m := rawDeliveryLink.FindStringSubmatch(res.eventPage)
			if m == nil {
				res.rawMissed = true
				return res, ok, nil
			}
			p.path = m[1]
		}
		step, answer, err := bigbodyStepOf(ctx, client, base, p.name, p.path, f.repeat, hwm)
		if err != nil {
			// A connection cut short is the first sign of a server that
			// died: its exit follows in moments.
			select {
			case <-srv.done:
				// The server died of the step: that is the figure.
				died, step.died, step.hwmKiB = true, fmt.Sprint(srv.err), hwm.read()
				res.steps = append(res.steps, step)
				fmt.Fprintf(env.stderr, "%s: the server died serving the %s: %v\n", c.name, p.name, srv.err)
				return res, false, nil
			case <-time.After(5 * time.Second):
				return nil, false, err
			}
		}
		if i < bigbodyPages && step.bytes > bigbodyPageMost {
			fmt.Fprintf(env.stderr, "%s: %s is %d bytes, over the console's page budget of %d\n", c.name, p.name, step.bytes, bigbodyPageMost)
			ok = false
		}
		switch {
		case i == 0:
			res.eventPage = answer
		case p.name == "raw body" && answer != string(body):
			return nil, false, fmt.Errorf("raw body: %d bytes, want the %d sent", len(answer), len(body))
		}
		res.steps = append(res.steps, step)
	}
	return res, ok, nil
}

// bigbodyIngest sends the signed event and waits until its effect is
// done, returning the effect's id.
func bigbodyIngest(ctx context.Context, env *receiveEnv, base, eventID string, body []byte) (int64, error) {
	u := base + "/hooks/stripe"
	sig, err := env.scheme.Sign(&signature.Request{Method: http.MethodPost, URL: u, Body: body}, time.Now(), eventID)
	if err != nil {
		return 0, fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = sig
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("send the event: %w", err)
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("send the event: HTTP %d %s", resp.StatusCode, answer)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var out struct {
			Effects []struct {
				ID int64 `json:"id"`
			} `json:"effects"`
		}
		if err := adminGet(ctx, base+"/api/v1/effects?state=done", env.token, &out); err != nil {
			return 0, err
		}
		if len(out.Effects) == 1 {
			return out.Effects[0].ID, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return 0, errors.New("the event's effect was not done within 2 minutes; see the server's log")
}

func adminGet(ctx context.Context, u, token string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// consoleLogin trades the admin token for a console session.
func consoleLogin(ctx context.Context, base, token string) (*http.Client, error) {
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/login", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("console login: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("console login: HTTP %d, want 303", resp.StatusCode)
	}
	return client, nil
}

// bigbodyStepOf requests path repeat times and reads the server's peak
// RSS after; it returns the last answer.
func bigbodyStepOf(ctx context.Context, client *http.Client, base, name, path string, repeat int, hwm *hwmSampler) (bigbodyStep, string, error) {
	step := bigbodyStep{name: name}
	var last []byte
	for range repeat {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return step, "", err
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return step, "", fmt.Errorf("GET %s: %w", path, err)
		}
		last, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil {
			return step, "", fmt.Errorf("GET %s: %w", path, err)
		}
		if resp.StatusCode != http.StatusOK {
			return step, "", fmt.Errorf("GET %s: HTTP %d %.200s", path, resp.StatusCode, last)
		}
		step.bytes, step.most = len(last), max(step.most, took)
	}
	step.hwmKiB = hwm.read()
	return step, string(last), nil
}

func printBigbody(w io.Writer, f *bigbodyFlags, results []*bigbodyResult) {
	fmt.Fprintf(w, "bigbody: one event per body on a fresh serve process (SQLite); each page requested %d times;\n", f.repeat)
	fmt.Fprintln(w, "peak RSS is the server's VmHWM after the step (it only grows)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-36s %-12s %12s %10s %14s\n", "body", "step", "bytes", "max ms", "peak RSS MiB")
	for _, r := range results {
		fmt.Fprintf(w, "%-36s %-12s %12d %10s %14s\n", r.name, "ingest", r.size, "", mib(r.ingestKiB))
		for _, s := range r.steps {
			if s.died != "" {
				fmt.Fprintf(w, "%-36s %-12s %12s %10s %14s  the server died: %s\n", "", s.name, "-", "-", mib(s.hwmKiB), s.died)
				continue
			}
			fmt.Fprintf(w, "%-36s %-12s %12d %10s %14s\n", "", s.name, s.bytes, ms(s.most), mib(s.hwmKiB))
		}
		if r.rawMissed {
			fmt.Fprintf(w, "%-36s %-12s %12s\n", "", "raw bytes", "(no link on the event page: not measured)")
		}
	}
}
