package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// ordersCompensations stands in for the flow engine's effect definitions:
// the orders flow's push effect declares a compensation, except for the
// entity o_plain, whose definition (in this test) has none.
type ordersCompensations struct{}

func (ordersCompensations) HasCompensation(o *store.Effect) bool {
	return o.Flow == "orders" && o.Effect == "push" && o.Entity != "o_plain" && o.Compensates == 0
}

func (ordersCompensations) CompensationRequest(_ context.Context, o *store.Effect) (json.RawMessage, error) {
	if o.Entity == "o_plain" {
		return nil, fmt.Errorf("flow %q effect %q has no compensation request: %w", o.Flow, o.Effect, flow.ErrNoCompensation)
	}
	return json.RawMessage(fmt.Sprintf(`{"method":"DELETE","path":"/orders/%s"}`, o.Entity)), nil
}

func TestCompensate(t *testing.T) {
	e := startOps(t, nil, Attachments{Compensations: ordersCompensations{}})
	done := e.f.addEffect(t, "o_done", "crm", store.EffectDone)
	plain := e.f.addEffect(t, "o_plain", "crm", store.EffectDone)
	page := "/effects/" + strconv.FormatInt(done, 10)

	if _, body := e.c.get(page); !strings.Contains(body, `id="compensate"`) {
		t.Fatalf("no compensate button on a done effect with a compensation: %s", body)
	}
	if _, body := e.c.get("/effects/" + strconv.FormatInt(plain, 10)); strings.Contains(body, `id="compensate"`) {
		t.Errorf("compensate offered for an effect whose definition has no compensation")
	}
	if _, body := e.c.get("/effects/" + strconv.FormatInt(e.f.deadID, 10)); strings.Contains(body, `id="compensate"`) {
		t.Errorf("compensate offered for a dead effect")
	}

	resp, body := e.c.post(page+"/compensate", url.Values{"csrf": {e.c.csrf}, "note": {" "}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Compensate needs a note") {
		t.Fatalf("compensate without a note: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.c.post(page+"/compensate", url.Values{"csrf": {"wrong"}, "note": {"refunded"}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("compensate with a wrong CSRF token: %d, want 403", resp.StatusCode)
	}

	resp, body = e.c.post(page+"/compensate", url.Values{"csrf": {e.c.csrf}, "note": {"order refunded by phone"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("compensate: %d %s", resp.StatusCode, body)
	}
	loc := resp.Header.Get("Location")
	id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(loc, "/effects/"), "?done=compensate"), 10, 64)
	if err != nil {
		t.Fatalf("redirect to %q, want the compensation effect's page", loc)
	}
	comp := e.f.effect(t, id)
	if comp.Compensates != done || comp.Effect != "push"+flow.CompensateSuffix || string(comp.Request) == "" ||
		!strings.Contains(string(comp.Request), "/orders/o_done") {
		t.Fatalf("compensation effect: compensates %d effect %q request %s", comp.Compensates, comp.Effect, comp.Request)
	}
	if _, body := e.c.get(loc); !strings.Contains(body, "Compensation recorded") || !strings.Contains(body, fmt.Sprintf(`href="/effects/%d"`, done)) {
		t.Errorf("compensation page: no confirmation or link to the original: %s", body)
	}
	audit, err := e.f.st.AuditList(context.Background(), &store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var noted bool
	for _, a := range audit {
		if a.Actor == actor && strings.Contains(a.Detail, "order refunded by phone") {
			noted = true
		}
	}
	if !noted {
		t.Errorf("no audit entry by %s with the note", actor)
	}

	// Refusals come back inline on the effect page, with the note kept.
	if _, body := e.c.get(loc); strings.Contains(body, `id="compensate"`) {
		t.Errorf("compensate offered for a compensation")
	}
	resp, body = e.c.post(loc[:strings.Index(loc, "?")]+"/compensate", url.Values{"csrf": {e.c.csrf}, "note": {"undo the undo"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "itself the compensation of effect") {
		t.Fatalf("compensation of a compensation: %d %s", resp.StatusCode, body)
	}
	resp, body = e.c.post(page+"/compensate", url.Values{"csrf": {e.c.csrf}, "note": {"twice"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "already compensated") || !strings.Contains(body, ">twice</textarea>") {
		t.Fatalf("second compensation: %d %s", resp.StatusCode, body)
	}
	resp, body = e.c.post("/effects/"+strconv.FormatInt(plain, 10)+"/compensate", url.Values{"csrf": {e.c.csrf}, "note": {"undo"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "no compensation request") {
		t.Fatalf("compensation without a template: %d %s", resp.StatusCode, body)
	}
}

func TestCompensateOffWithoutEngine(t *testing.T) {
	e := startOps(t, nil, Attachments{})
	done := e.f.addEffect(t, "o_done", "crm", store.EffectDone)
	page := "/effects/" + strconv.FormatInt(done, 10)
	if _, body := e.c.get(page); strings.Contains(body, `id="compensate"`) {
		t.Errorf("compensate offered without a flow engine")
	}
	if resp, _ := e.c.post(page+"/compensate", url.Values{"csrf": {e.c.csrf}, "note": {"undo"}}); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("compensate without a flow engine: %d, want 422", resp.StatusCode)
	}
}
