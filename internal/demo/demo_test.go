package demo

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
)

// The demo config loads at every speed, and no duration drops below what
// the server's loops can see pass.
func TestConfigLoadsAtEverySpeed(t *testing.T) {
	for _, speed := range []float64{0, 0.5, 1, 20, 1e6} {
		d := durationsAt(speed)
		yaml := demoConfig(configParams{Listen: "127.0.0.1:0", StoreURL: "sqlite:" + t.TempDir() + "/d.db",
			AdminToken: "tok", DestURL: "http://127.0.0.1:1", Secret: "s", Durations: d})
		cfg, err := config.Parse("demo.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("speed %v: %v", speed, err)
		}
		if len(cfg.Flows) != 4 || len(cfg.Destinations) != 10 {
			t.Fatalf("speed %v: %d flows, %d destinations", speed, len(cfg.Flows), len(cfg.Destinations))
		}
		for name, v := range map[string]time.Duration{"deadline": d.Deadline, "verify": d.VerifyAfter,
			"retry": d.Retry, "signals": d.Signals} {
			if v < minDuration {
				t.Errorf("speed %v: %s %s below %s", speed, name, v, minDuration)
			}
		}
		if d.CallTimeout < 250*time.Millisecond {
			t.Errorf("speed %v: call timeout %s", speed, d.CallTimeout)
		}
	}
	if d := durationsAt(1); d.Deadline != 20*time.Second || d.VerifyAfter != 15*time.Second {
		t.Fatalf("speed 1: %+v, want the documented 20s deadline and 15s verification", d)
	}
}

// The fake destination misbehaves exactly where the script expects it to.
func TestDestinationScript(t *testing.T) {
	d, err := startDestination()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	call := func(method, path, order, key string, timeout time.Duration) (*http.Response, error) {
		t.Helper()
		var body *strings.Reader
		if order != "" {
			body = strings.NewReader(`{"order":"` + order + `"}`)
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, d.URL()+path, body)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := (&http.Client{Timeout: timeout}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	for _, c := range []struct {
		method, path, order, key string
		want                     int
		header, value            string
	}{
		{"POST", "/notify/created", "ord-1", "", 201, "", ""},
		{"POST", "/mail/messages", "ord-1", "k1", 201, "", ""},
		{"GET", "/mail/messages/k1", "", "", 200, "", ""},
		{"POST", "/mail/messages", orderForgetMail, "k2", 201, "", ""},
		{"GET", "/mail/messages/k2", "", "", 404, "", ""}, // lost: verification finds it missing
		{"POST", "/mail/void", "ord-1", "k3", 503, "", ""},
		{"POST", "/carrier/bookings", "ord-5", "", 429, "Retry-After", retryAfterSecond},
		{"POST", "/carrier/bookings", "ord-5", "", 201, "", ""},
		{"POST", "/warehouse/invoices", "ord-6", "", 422, "", ""},
		{"POST", "/warehouse/invoices", "ord-6", "", 422, "", ""}, // permanent: a second call is refused too
		{"POST", "/warehouse/vat-numbers", "ord-6", "", 204, "", ""},
		{"POST", "/warehouse/invoices", "ord-6", "", 201, "", ""},  // fixed at the warehouse: a retry succeeds
		{"POST", "/warehouse/invoices", "ord-16", "", 422, "", ""}, // another order is still refused
		{"POST", "/marketing/members", "ord-7", "", 200, "", ""},
		{"POST", "/dunning/mails", "ord-9", "", 503, "", ""},
		{"GET", "/inventory-api/skus/sku-1", "", "", 503, "", ""},
		{"POST", "/ledger/entries", "ord-1", "", 201, "", ""},
		{"GET", "/nowhere", "", "", 404, "", ""},
	} {
		resp, err := call(c.method, c.path, c.order, c.key, 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if resp.StatusCode != c.want || (c.header != "" && resp.Header.Get(c.header) != c.value) {
			t.Errorf("%s %s (%s): %d %v, want %d", c.method, c.path, c.order, resp.StatusCode, resp.Header, c.want)
		}
	}
	// The CRM keeps the contact, then hangs: the lookup finds it.
	if _, err := call("POST", "/crm/contacts", orderHangCRM, "crm-1", 200*time.Millisecond); err == nil {
		t.Fatal("the CRM answered the hanging order")
	}
	if resp, err := call("GET", "/crm/contacts/crm-1", "", "", 5*time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("lookup after the hang: %v %v, want 200", resp, err)
	}
	if _, err := call("POST", "/ledger/entries", orderHangLedger, "", 200*time.Millisecond); err == nil {
		t.Fatal("the ledger answered the hanging order")
	}
	if n := d.Calls("/carrier/bookings"); n != 2 {
		t.Errorf("carrier calls %d, want 2", n)
	}
	// Close releases a call still hanging.
	errc := make(chan error, 1)
	go func() {
		_, err := call("POST", "/ledger/entries", orderHangLedger, "", 0)
		errc <- err
	}()
	for d.Calls("/ledger/entries") < 3 {
		time.Sleep(time.Millisecond) // waiting for the call to arrive, not measuring time
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not release the hanging call")
	}
	<-errc
}
