package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/publish"
	"github.com/hookledger/hookledger/internal/store"
)

// The endpoints page lists the publishing endpoints with their state and
// backlog, and disables and enables them (with the CSRF token), through
// the real publishing service on the fixture's store.
func TestEndpointsPage(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	if _, body := c.get("/endpoints"); !strings.Contains(body, "no publishing service attached") {
		t.Fatalf("without the service the page should say it is off: %s", body)
	}

	cfg, err := config.Parse("c.yaml", []byte("{}"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	svc := publish.New(cfg, f.st, publish.Options{Clock: f.clk})
	ctx := context.Background()
	u, types := "https://partner.example/hooks", []string{"invoice.*"}
	id := "partner"
	if _, err := svc.Create(ctx, &publish.EndpointInput{ID: &id, URL: &u, Types: &types}, "test"); err != nil {
		t.Fatal(err)
	}
	con.Attach(Attachments{Endpoints: svc})

	_, body := c.get("/endpoints")
	for _, want := range []string{"partner", "https://partner.example/hooks", "invoice.*", ">enabled<", "/endpoints/partner/disable", ">v1<"} {
		if !strings.Contains(body, want) {
			t.Fatalf("endpoints page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "whsec_") {
		t.Fatal("the endpoints page shows a signing key")
	}
	if resp, _ := c.post("/endpoints/partner/disable", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("disable without the CSRF token: %d, want 403", resp.StatusCode)
	}
	resp, _ := c.post("/endpoints/partner/disable", url.Values{"csrf": {c.csrf}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/endpoints?done=disable" {
		t.Fatalf("disable: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	e, err := f.st.EndpointGet(ctx, "partner")
	if err != nil || e.Enabled || !strings.Contains(e.DisabledReason, actor) {
		t.Fatalf("after disabling: %+v %v", e, err)
	}
	rows, err := f.st.AuditList(ctx, &store.AuditListParams{Action: store.ActionEndpointDisabled, Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].Actor != actor {
		t.Fatalf("audit of the disable: %+v %v", rows, err)
	}
	_, body = c.get("/endpoints?done=disable")
	if !strings.Contains(body, "Endpoint disabled") || !strings.Contains(body, ">disabled<") || !strings.Contains(body, "/endpoints/partner/enable") {
		t.Fatalf("page after disabling:\n%s", body)
	}
	if resp, _ := c.post("/endpoints/partner/enable", url.Values{"csrf": {c.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("enable: %d", resp.StatusCode)
	}
	if e, _ := f.st.EndpointGet(ctx, "partner"); !e.Enabled {
		t.Fatal("not enabled again")
	}
	if resp, _ := c.post("/endpoints/nosuch/disable", url.Values{"csrf": {c.csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown endpoint: %d, want 404", resp.StatusCode)
	}
	if resp, _ := c.post("/endpoints/partner/explode", url.Values{"csrf": {c.csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown action: %d, want 404", resp.StatusCode)
	}
}
