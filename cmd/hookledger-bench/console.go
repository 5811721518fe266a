package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/console"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

type consoleFlags struct {
	signalsFlags
	requests int
	target   time.Duration
}

// consoleTarget is the latency every console list page must stay under at
// p99 on a store of a million events (the console issue's acceptance).
const consoleTarget = 200 * time.Millisecond

func runConsole(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "console", "console [--events 1000000] [--effects 1000000] [--requests 100] [--postgres URL] [flags]",
		"The operator console's list pages on a large store: loads --events events and\n"+
			"--effects effects (the signals benchmark's fixture, by INSERT ... SELECT) into a\n"+
			"fresh store, serves the console and the admin API in this process on loopback,\n"+
			"logs in, and requests every list page --requests times: events unfiltered, by\n"+
			"disposition, by entity, by source and type, by a receipt time range and a deep\n"+
			"page by cursor; effects as the exception queue, by destination and in any state;\n"+
			"and the destinations and sources page.\n"+
			"It prints p50 and p99 per page beside the same query through the admin API's JSON\n"+
			"(no templates, no session) and /healthz (the HTTP floor), all measured in the same\n"+
			"run. Exit 1 when a console page's p99 is over --target or a page does not answer 200.")
	var f consoleFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped (omit to measure SQLite only)")
	drivers := fs.String("drivers", "", "comma-separated `drivers` (default sqlite, plus postgres when --postgres is set)")
	fs.IntVar(&f.events, "events", 1_000_000, "events (and work items) loaded")
	fs.IntVar(&f.effects, "effects", 1_000_000, "effects loaded")
	fs.IntVar(&f.entities, "entities", 200_000, "entities the events are spread over")
	fs.IntVar(&f.requests, "requests", 100, "requests per page and per baseline")
	fs.DurationVar(&f.target, "target", consoleTarget, "p99 each console list page must stay under")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir holding the SQLite file (default the system temp dir)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	var err error
	if f.drivers, err = chooseTargets(*drivers, []string{"sqlite"}, []string{"sqlite", "postgres"}, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench console: --drivers: %v\n", err)
		return exitUsage
	}
	if f.events < 10_000 || f.effects < 10_000 || f.entities < 1000 || f.entities > f.events || f.requests < 1 {
		fmt.Fprintln(stderr, "hookledger-bench console: --events and --effects must be at least 10000, --entities between 1000 and --events, --requests positive")
		return exitUsage
	}
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-console-")
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench console: %v\n", err)
		return exitFail
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(stdout, "console: %d events, %d effects, %d entities, %d requests per page, target p99 < %s\n\n",
		f.events, f.effects, f.entities, f.requests, f.target)
	fmt.Fprintf(stdout, "%-9s %-28s %9s %9s %9s %9s  %s\n", "driver", "page (ms)", "p50", "p99", "api p50", "api p99", "")
	ok := true
	var rows []headline
	for _, driver := range f.drivers {
		cellOK, cellRows, err := consoleCell(ctx, stdout, stderr, &f, dir, driver)
		if err != nil {
			fmt.Fprintf(stderr, "hookledger-bench console: %s: %v\n", driver, err)
			return exitFail
		}
		ok = ok && cellOK
		rows = append(rows, cellRows...)
	}
	if *table {
		printHeadlines(stdout, "console", rows)
	}
	if !ok {
		return exitFail
	}
	return exitOK
}

// consolePage is one list page and the admin API query that reads the same
// rows.
type consolePage struct {
	name, page, api string
	// other marks a page that is not a list: measured and reported, but
	// the target is the lists'.
	other bool
}

// consolePages are the list pages measured, with filters that select from
// the fixture: a rare disposition (one event in a thousand), one entity's
// handful of events, a one-hour window in the middle of the 48 hours, and a
// page nine tenths of the way through the events.
func consolePages(f *consoleFlags, now time.Time) []consolePage {
	t0 := now.Add(-48 * time.Hour)
	from := t0.Add(24 * time.Hour).Format(time.RFC3339)
	to := t0.Add(25 * time.Hour).Format(time.RFC3339)
	deep := api.EncodeCursor(int64(f.events) * 9 / 10)
	entity := fmt.Sprintf("ord_%d", f.entities/2+7)
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	return []consolePage{
		{"events", "/events", "/api/v1/events?limit=50", false},
		{"events disposition", "/events?" + q("disposition", "dead_lettered"), "/api/v1/events?limit=50&" + q("disposition", "dead_lettered"), false},
		{"events entity", "/events?" + q("entity", entity), "/api/v1/events?limit=50&" + q("entity", entity), false},
		{"events source+type", "/events?" + q("source", "stripe", "type", "order.updated"), "/api/v1/events?limit=50&" + q("source", "stripe", "type", "order.updated"), false},
		{"events received 1h", "/events?" + q("received_from", from, "received_to", to), "/api/v1/events?limit=50&" + q("received_from", from, "received_to", to), false},
		{"events deep cursor", "/events?" + q("cursor", deep), "/api/v1/events?limit=50&" + q("cursor", deep), false},
		{"effects exception queue", "/effects", "/api/v1/effects?limit=50&state=exceptions", false},
		{"effects destination", "/effects?" + q("state", "any", "destination", "crm"), "/api/v1/effects?limit=50&" + q("state", "any", "destination", "crm"), false},
		{"effects state=any", "/effects?" + q("state", "any"), "/api/v1/effects?limit=50&" + q("state", "any"), false},
		{"effects state+dest", "/effects?" + q("state", "dead", "destination", "mailer"), "/api/v1/effects?limit=50&" + q("state", "dead", "destination", "mailer"), false},
		// Not a list, but read on every visit during an incident: its
		// reads are bounded by rows (store.Stats). The API has no
		// equivalent.
		{"destinations and sources", "/destinations", "", true},
	}
}

// consoleCell loads the fixture into a fresh store of driver and measures
// every page; it returns whether every list page kept the target, with the
// table rows: the slowest list page and the page that is not a list.
func consoleCell(ctx context.Context, stdout, stderr io.Writer, f *consoleFlags, dir, driver string) (ok bool, rows []headline, err error) {
	cs, err := newCellStore(ctx, driver, dir, f.postgres, "console")
	if err != nil {
		return false, nil, err
	}
	defer func() { err = errors.Join(err, cs.Drop()) }()
	st, err := storeopen.Open(ctx, cs.URL)
	if err != nil {
		return false, nil, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if _, err := st.Migrate(ctx); err != nil {
		return false, nil, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	fmt.Fprintf(stderr, "%s: loading %d events and %d effects...\n", driver, f.events, f.effects)
	start := time.Now()
	if _, err := loadSignalsFixture(ctx, driver, cs.URL, &f.signalsFlags, now); err != nil {
		return false, nil, fmt.Errorf("load fixture: %w", err)
	}
	if err := loadConsoleAttempts(ctx, driver, cs.URL, f.effects/5, now); err != nil {
		return false, nil, fmt.Errorf("load attempts: %w", err)
	}
	fmt.Fprintf(stderr, "%s: loaded in %s\n", driver, time.Since(start).Round(time.Millisecond))

	const token = "bench-console-token"
	con := console.New(st, token, nil, clock.Real{})
	defer con.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("/api/v1/", api.New(st, token, nil, time.Now))
	mux.Handle("/", con)
	srv := httptest.NewServer(mux) // binds 127.0.0.1
	defer srv.Close()

	c, err := newConsoleClient(srv.URL, token, f.requests)
	if err != nil {
		return false, nil, err
	}
	health, err := c.measure(ctx, "/healthz", false)
	if err != nil {
		return false, nil, err
	}
	fmt.Fprintf(stdout, "%-9s %-28s %9s %9s %9s %9s  %s\n", driver, "/healthz (floor)", ms(health.pct(0.5)), ms(health.pct(0.99)), "", "", "")
	ok = true
	var slowest, other headline
	var slowestP99 time.Duration
	for _, p := range consolePages(f, now) {
		page, err := c.measure(ctx, p.page, false)
		if err != nil {
			return false, nil, fmt.Errorf("%s: %w", p.name, err)
		}
		apiP50, apiP99 := "-", "-"
		var apiLat latencies
		if p.api != "" {
			apiLat, err = c.measure(ctx, p.api, true)
			if err != nil {
				return false, nil, fmt.Errorf("%s (api): %w", p.name, err)
			}
			apiP50, apiP99 = ms(apiLat.pct(0.5)), ms(apiLat.pct(0.99))
		}
		h := headline{
			figure:   fmt.Sprintf("%s: %s page", driverName(driver), p.name),
			value:    fmt.Sprintf("p50 %s ms, p99 %s ms", ms(page.pct(0.5)), ms(page.pct(0.99))),
			baseline: fmt.Sprintf("/healthz p99 %s ms", ms(health.pct(0.99))),
		}
		if len(apiLat) > 0 {
			h.baseline = fmt.Sprintf("the same query as JSON p99 %s ms; %s", ms(apiLat.pct(0.99)), h.baseline)
			h.ratio = fmt.Sprintf("%.2fx the JSON", float64(page.pct(0.99))/float64(apiLat.pct(0.99)))
		}
		if p.other {
			h.goal = "none (not a list page)"
			other = h
		} else if page.pct(0.99) >= slowestP99 {
			h.figure = fmt.Sprintf("%s: slowest list page of %d (%s)", driverName(driver), len(consolePages(f, now))-1, p.name)
			h.goal = fmt.Sprintf("every list page p99 under %s: %s", f.target, verdict(page.pct(0.99) < f.target))
			slowest, slowestP99 = h, page.pct(0.99)
		}
		verdict := "ok"
		switch {
		case page.pct(0.99) >= f.target && p.other:
			verdict = "over " + f.target.String() + " (not a list page)"
		case page.pct(0.99) >= f.target:
			verdict, ok = "OVER "+f.target.String(), false
		}
		fmt.Fprintf(stdout, "%-9s %-28s %9s %9s %9s %9s  %s\n", driver, p.name, ms(page.pct(0.5)), ms(page.pct(0.99)),
			apiP50, apiP99, verdict)
	}
	if !ok {
		fmt.Fprintf(stderr, "%s: a console list page's p99 is over %s\n", driver, f.target)
		slowest.goal = fmt.Sprintf("every list page p99 under %s: %s", f.target, verdict(false))
	}
	rows = append(rows, slowest)
	if other.figure != "" {
		rows = append(rows, other)
	}
	return ok, rows, nil
}

// consoleClient requests the console's pages and the API behind one
// server, logged in.
type consoleClient struct {
	client   *http.Client
	base     string
	token    string
	requests int
}

// newConsoleClient logs in to the console at base with token; the client
// then measures each page with requests requests.
func newConsoleClient(base, token string, requests int) (*consoleClient, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(base+"/login", url.Values{"token": {token}, "next": {"/"}})
	if err != nil {
		return nil, fmt.Errorf("log in: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("log in: status %d", resp.StatusCode)
	}
	return &consoleClient{client: client, base: base, token: token, requests: requests}, nil
}

// get reads path whole, with the bearer token or the session's cookie,
// and returns how long that took.
func (c *consoleClient) get(ctx context.Context, path string, bearer bool) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, err
	}
	if bearer {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	t := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	d := time.Since(t)
	_ = resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return d, nil
}

// measure is the sorted latencies of the client's requests for path.
func (c *consoleClient) measure(ctx context.Context, path string, bearer bool) (latencies, error) {
	// One unmeasured request warms the statement cache and the pages.
	if _, err := c.get(ctx, path, bearer); err != nil {
		return nil, err
	}
	var l latencies
	for range c.requests {
		d, err := c.get(ctx, path, bearer)
		if err != nil {
			return nil, err
		}
		l = append(l, d)
	}
	slices.Sort(l)
	return l, nil
}

// loadConsoleAttempts adds n calls (one to each of the first n effects,
// spread over the last 24 hours, a tenth failing) to the signals
// fixture, which has none: the destinations page reads the newest of them.
func loadConsoleAttempts(ctx context.Context, driver, storeURL string, n int, now time.Time) error {
	t0 := now.Add(-24 * time.Hour).UnixMicro()
	step := (24 * time.Hour).Microseconds() / int64(n)
	cols := `INSERT INTO effect_attempts (effect_id, number, started_at, duration_us, status, class, error, response,
		retry_after, retry_after_unit, wait_us, reconcile)`
	pick := `CASE WHEN i % 10 = 0 THEN 503 WHEN i % 25 = 1 THEN 429 ELSE 200 END,
		CASE WHEN i % 10 = 0 THEN 'transient' WHEN i % 25 = 1 THEN 'quota' ELSE '' END, '', '', '', '', 0`
	switch driver {
	case "sqlite":
		db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(storeURL, "sqlite:")+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, fmt.Sprintf(`%s SELECT i, 1, %d + i * %d, 1000 + (i * 7919) %% 300000, %s, 0
			FROM %s`, cols, t0, step, pick, sqliteSeries(n)))
		return err
	case "postgres":
		conn, err := pgx.Connect(ctx, singleConnURL(storeURL))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, fmt.Sprintf(`%s SELECT i, 1, to_timestamp((%d + i * %d)::float8 / 1e6), 1000 + (i * 7919) %% 300000, %s, false
			FROM %s`, cols, t0, step, pick, postgresSeries(n)))
		return err
	}
	return fmt.Errorf("unknown driver %q", driver)
}
