package console

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// deepJSON is a valid JSON object of at least size bytes whose fields
// d0..d(fields-1) are arrays nested depth deep, padded with a long string:
// the shape that made the console pretty-print hundreds of megabytes
// (indentation grows with the square of the depth).
func deepJSON(depth, fields, size int) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := range fields {
		fmt.Fprintf(&b, `"d%d":`, i)
		b.WriteString(strings.Repeat("[", depth))
		b.WriteString(strings.Repeat("]", depth))
		b.WriteByte(',')
	}
	b.WriteString(`"pad":"`)
	if n := size - b.Len() - 2; n > 0 {
		b.WriteString(strings.Repeat("x", n))
	}
	b.WriteString(`"}`)
	return b.Bytes()
}

// deepRecords stores, through the store contract, what the finding
// reached the console with: an event whose 1 MiB body holds two arrays
// nested 9,990 deep (delivered deliveries times), an entity whose state
// is nested as deep, and an effect whose request is.
type deepRecords struct {
	body, state, request []byte
	effectID             int64
}

const deepDepth = 9990

func storeDeep(t *testing.T, f *fixture, deliveries int) *deepRecords {
	t.Helper()
	ctx := context.Background()
	d := &deepRecords{body: deepJSON(deepDepth, 2, 1<<20), state: deepJSON(deepDepth, 1, 1<<20),
		request: deepJSON(deepDepth, 1, 1<<20)}
	var pk int64
	for i := range deliveries {
		res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprintf("req_deep_%d", i), Source: "stripe", EventID: "evt_deep", Type: "customer.subscription.updated",
			Entity: "sub_deep", OccurredAt: t0, ReceivedAt: f.clk.Now(), Headers: map[string]string{"Content-Type": "application/json"},
			Body: d.body,
		}}}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("store evt_deep: %v %v", err, res)
		}
		pk = res[0].Items[0].EventPK
		f.clk.Advance(time.Second)
	}
	if err := f.st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: []*store.RouteDecision{
		{EventPK: pk, Routes: []store.Route{{Flow: "billing_to_crm", Entity: "sub_deep", OrderKey: "1"}}}}}); err != nil {
		t.Fatalf("route: %v", err)
	}
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim entity: %v %v", leases, err)
	}
	work, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "billing_to_crm", Entity: "sub_deep", Limit: 10})
	if err != nil || len(work) != 1 {
		t.Fatalf("pending work: %v %v", work, err)
	}
	if _, err := f.st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: work[0].ID,
		EventPK: pk, Actor: "worker", Ordered: true, Version: "r1", VersionSort: "0000000001", State: d.state,
		Effects: []*store.EffectInsert{{EpisodeKey: "billing_to_crm:sub_deep:r1:upsert_deal", Effect: "upsert_deal",
			Destination: "crm", Request: d.request}}}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if err := f.st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: leases[0], Now: f.clk.Now()}); err != nil {
		t.Fatalf("release: %v", err)
	}
	es, err := f.st.EffectList(ctx, &store.EffectListParams{Flow: "billing_to_crm", Entity: "sub_deep", Limit: 10})
	if err != nil || len(es) != 1 {
		t.Fatalf("deep effect: %v %v", es, err)
	}
	d.effectID = es[0].ID
	return d
}

// served is one request through the console handler in this goroutine,
// with the bytes the process allocated meanwhile.
type served struct {
	code   int
	header http.Header
	body   string
	alloc  uint64
}

func serveMeasured(t *testing.T, h http.Handler, cookies []*http.Cookie, path string) served {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	rec := httptest.NewRecorder()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	return served{code: rec.Code, header: rec.Header(), body: rec.Body.String(), alloc: after.TotalAlloc - before.TotalAlloc}
}

// loggedIn returns the session cookie of a console login.
func loggedIn(t *testing.T, srv *httptest.Server) []*http.Cookie {
	t.Helper()
	c := newClient(t, srv)
	c.login()
	u, _ := url.Parse(srv.URL)
	return c.hc.Jar.Cookies(u)
}

var preRE = regexp.MustCompile(`(?s)<pre[^>]*aria-label="([^"]*)"[^>]*>(.*?)</pre>`)

// The finding: one 1 MiB event nested 9,990 deep made a 200-400 MB page and
// gigabytes of allocation. Every page that shows a deep body stays within
// the page budget, shows the body raw and cut with a link to its raw
// bytes, and allocates a bounded amount whatever the body.
func TestDeepBodiesStayWithinTheBudget(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	deep := storeDeep(t, f, 1)
	cookies := loggedIn(t, srv)
	const (
		pageMost  = 1 << 20  // far above what these pages need, far below the finding's 200 MB
		allocMost = 16 << 20 // bytes allocated while serving one page, the stored state or request read whole
	)
	for _, tc := range []struct {
		name, path, label string
		raw               []byte
	}{
		{"event", "/event?source=stripe&event_id=evt_deep", "Body of delivery", deep.body},
		{"entity", "/entity?flow=billing_to_crm&entity=sub_deep", "Current state", deep.state},
		{"effect", fmt.Sprintf("/effects/%d", deep.effectID), "Request", deep.request},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serveMeasured(t, con, cookies, tc.path)
			if got.code != http.StatusOK {
				t.Fatalf("GET %s: %d %.300s", tc.path, got.code, got.body)
			}
			t.Logf("GET %s: %d-byte page, %d bytes allocated", tc.path, len(got.body), got.alloc)
			if len(got.body) > pageMost {
				t.Errorf("GET %s: page of %d bytes, want at most %d", tc.path, len(got.body), pageMost)
			}
			if got.alloc > allocMost {
				t.Errorf("GET %s: %d bytes allocated while serving, want at most %d", tc.path, got.alloc, allocMost)
			}
			m := preRE.FindStringSubmatch(got.body)
			if m == nil || !strings.HasPrefix(m[1], tc.label) {
				t.Fatalf("GET %s: no body shown (%q)", tc.path, tc.label)
			}
			shown := html.UnescapeString(m[2])
			if len(shown) > 64<<10 || !strings.HasPrefix(string(tc.raw), shown) {
				t.Errorf("GET %s: %d bytes shown, want the first 64 KiB of the body as stored", tc.path, len(shown))
			}
			raw := rawLink(t, got.body)
			if raw == "" {
				t.Fatalf("GET %s: no link to the raw bytes", tc.path)
			}
			note := fmt.Sprintf("%d of %d bytes", len(shown), len(tc.raw))
			if len(tc.raw) > len(shown) && !strings.Contains(got.body, note) {
				t.Errorf("GET %s: no note saying %q", tc.path, note)
			}
			// The raw bytes, whole, never as a page.
			dl := serveMeasured(t, con, cookies, raw)
			if dl.code != http.StatusOK || dl.body != string(tc.raw) {
				t.Fatalf("GET %s: %d, %d bytes, want the %d stored bytes", raw, dl.code, len(dl.body), len(tc.raw))
			}
			for k, want := range map[string]string{"Content-Type": "application/octet-stream",
				"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
				if g := dl.header.Get(k); g != want {
					t.Errorf("GET %s: %s %q, want %q", raw, k, g, want)
				}
			}
			if cd := dl.header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") {
				t.Errorf("GET %s: Content-Disposition %q, want an attachment", raw, cd)
			}
		})
	}
}

var rawLinkRE = regexp.MustCompile(`<a href="([^"]+)"[^>]*>Raw bytes`)

func rawLink(t *testing.T, page string) string {
	t.Helper()
	m := rawLinkRE.FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

var nextDeliveriesRE = regexp.MustCompile(`<a href="([^"]+)" rel="next" id="next-deliveries">`)

// An event delivered many times shows its deliveries a page at a time,
// each body read only as far as it is shown: the page costs the same for
// twelve 1 MiB deliveries as for one.
func TestEventDeliveriesPagedAndReadInPart(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	const n = 2*deliveriesPerPage + 2
	deep := storeDeep(t, f, n)
	cookies := loggedIn(t, srv)
	path, seen := "/event?source=stripe&event_id=evt_deep", 0
	for pages := 0; path != ""; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		got := serveMeasured(t, con, cookies, path)
		if got.code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, got.code, got.body)
		}
		// Six 1 MiB bodies read whole would be 6 MiB by themselves, and
		// the driver copies each.
		t.Logf("GET %s: %d-byte page, %d bytes allocated", path, len(got.body), got.alloc)
		if got.alloc > 8<<20 {
			t.Errorf("GET %s: %d bytes allocated, want at most 8 MiB: a body read whole?", path, got.alloc)
		}
		shown := strings.Count(got.body, `<section class="delivery"`)
		if shown == 0 || shown > deliveriesPerPage {
			t.Fatalf("GET %s: %d deliveries shown, want 1 to %d", path, shown, deliveriesPerPage)
		}
		for _, m := range preRE.FindAllStringSubmatch(got.body, -1) {
			if b := html.UnescapeString(m[2]); len(b) != 64<<10 || !strings.HasPrefix(string(deep.body), b) {
				t.Errorf("GET %s: %s shows %d bytes, want the body's first 64 KiB", path, m[1], len(b))
			}
		}
		seen += shown
		path = ""
		if m := nextDeliveriesRE.FindStringSubmatch(got.body); m != nil {
			// A browser keeps the #fragment to itself.
			path, _, _ = strings.Cut(html.UnescapeString(m[1]), "#")
		}
	}
	if seen != n {
		t.Errorf("%d deliveries over all pages, want %d", seen, n)
	}
	if got := serveMeasured(t, con, cookies, "/event?source=stripe&event_id=evt_deep&deliveries_cursor=nope"); got.code != http.StatusBadRequest {
		t.Errorf("a cursor the console did not make: %d, want 400", got.code)
	}
}

// Whatever the store holds, no page is built past maxPageBytes: an event
// whose audit trail alone would make a larger page is refused, with a
// message, having built no more than the budget.
func TestPageBudgetRefusesLargerPages(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	ctx := context.Background()
	detail := strings.Repeat("<>", 5<<10) // 10 KiB, escaped 40 KiB
	for range maxPageBytes/(40<<10) + 10 {
		if _, err := f.st.AuditInsert(ctx, &store.AuditInsertParams{At: f.clk.Now(), Actor: "worker", Action: "note",
			Source: "stripe", EventID: "evt_1", Detail: detail}); err != nil {
			t.Fatal(err)
		}
	}
	cookies := loggedIn(t, srv)
	got := serveMeasured(t, con, cookies, "/event?source=stripe&event_id=evt_1")
	if got.code != http.StatusInternalServerError || !strings.Contains(got.body, "larger than the 8 MiB the console builds a page to") {
		t.Fatalf("over-budget page: %d %.200q, want 500 saying why", got.code, got.body)
	}
	// The page up to the budget, and html/template's escaping of what it
	// wrote (each escaped string is built in a buffer of its own): a fixed
	// multiple of the budget, however many more rows the store holds.
	if got.alloc > 6*maxPageBytes {
		t.Errorf("%d bytes allocated for a refused page, want at most %d", got.alloc, 6*maxPageBytes)
	}
	// A page within the budget is unaffected.
	if got := serveMeasured(t, con, cookies, "/event?source=stripe&event_id=evt_2"); got.code != http.StatusOK {
		t.Errorf("evt_2: %d", got.code)
	}
}
