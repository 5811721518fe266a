package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signature"
)

// player posts the dossier's webhooks to the server, signed as each
// source's sender would sign them, and reads the outcome of each step
// back from the admin API. Its waits poll for a state, never for a time.
type player struct {
	base    string // the server, http://host:port
	token   string // admin.token
	schemes map[string]signature.Scheme
	dest    *Destination
	out     io.Writer
	client  *http.Client
	d       demoDurations
	poll    time.Duration     // between two reads of a state being waited for
	wait    time.Duration     // the longest a step waits for its outcome
	sent    map[string]string // the first body sent per event id, for the repeats
}

func newPlayer(cfg *config.Config, base string, dest *Destination, out io.Writer, d demoDurations) (*player, error) {
	p := &player{base: base, token: cfg.Admin.Token, schemes: map[string]signature.Scheme{}, sent: map[string]string{}, dest: dest, out: out,
		client: &http.Client{Timeout: 30 * time.Second}, d: d, poll: 20 * time.Millisecond,
		// A step waits for a few call timeouts and retries at most; a
		// minute means something is wrong, not slow.
		wait: time.Minute}
	for _, src := range cfg.Sources {
		s, err := signature.New(src.SchemeOptions())
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", src.Name, err)
		}
		p.schemes[src.Name] = s
	}
	return p, nil
}

// step is one line of the script: what is played, and how to tell what
// hookledger made of it.
type step struct {
	what string
	play func(ctx context.Context) (string, error)
}

// order is a shop webhook body that occurred now; an empty intent leaves
// the field out.
func order(eventID, typ, orderID string, rev int, intent string) string {
	return orderAt(time.Now(), eventID, typ, orderID, rev, intent)
}

// orderAt is order at a business time of its own: the dossier's order was
// created, confirmed and cancelled minutes apart, and its confirmation
// arrives last although it occurred second.
func orderAt(at time.Time, eventID, typ, orderID string, rev int, intent string) string {
	in := ""
	if intent != "" {
		in = fmt.Sprintf(`,"intent":%q`, intent)
	}
	return fmt.Sprintf(`{"eventId":%q,"type":%q,"occurredAt":%q,"order_id":%q,"revision":%d%s}`,
		eventID, typ, at.UTC().Format(time.RFC3339Nano), orderID, rev, in)
}

func (p *player) steps() []step {
	return append(p.orderSteps(), p.edgeSteps()...)
}

// sendDisposed sends one event of the shop and waits until it has the
// disposition want.
func (p *player) sendDisposed(ctx context.Context, body, eventID, want string) error {
	if err := p.send(ctx, "shop", body, nil); err != nil {
		return err
	}
	return p.disposition(ctx, "shop", eventID, want)
}

// sendEffect sends one order event of the shop and waits until the
// order's effect is in one of states.
func (p *player) sendEffect(ctx context.Context, body, orderID, effect string, states ...string) (*effectJSON, error) {
	if err := p.send(ctx, "shop", body, nil); err != nil {
		return nil, err
	}
	return p.effect(ctx, "orders", orderID, effect, states...)
}

// orderSteps are the dossier's order ord-1001 (duplicates and a late
// revision) and what each destination does to one order's effect.
func (p *player) orderSteps() []step {
	d := p.d
	created := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	confirmed, cancelled := created.Add(2*time.Minute), created.Add(5*time.Minute)
	return []step{
		{"create r1: order.created ord-1001 r1", func(ctx context.Context) (string, error) {
			if err := p.sendDisposed(ctx, orderAt(created, "evt-1001-r1", "order.created", "ord-1001", 1, "CREATED"), "evt-1001-r1", "applied"); err != nil {
				return "", err
			}
			if _, err := p.effect(ctx, "orders", "ord-1001", "notify_created", "done"); err != nil {
				return "", err
			}
			return "applied; notify_created done (notifier 201)", nil
		}},
		{"duplicate delivery: the same webhook again", func(ctx context.Context) (string, error) {
			// The body is byte for byte the first one's, as a sender's retry is.
			if err := p.send(ctx, "shop", p.sent["evt-1001-r1"], nil); err != nil {
				return "", err
			}
			if err := p.until(ctx, "a second delivery of evt-1001-r1", func() (bool, error) {
				ev, err := p.event(ctx, "shop", "evt-1001-r1")
				return ev != nil && ev.Deliveries == 2, err
			}); err != nil {
				return "", err
			}
			return "200; recorded as delivery 2 of one event, nothing new to do", nil
		}},
		{"duplicate event: same change, new event id", func(ctx context.Context) (string, error) {
			err := p.sendDisposed(ctx, orderAt(created, "evt-1001-r1-copy", "order.created", "ord-1001", 1, "CREATED"), "evt-1001-r1-copy", "duplicate")
			return "duplicate; still one notify_created", err
		}},
		{"cancel r3: order.cancelled ord-1001 r3", func(ctx context.Context) (string, error) {
			if err := p.sendDisposed(ctx, orderAt(cancelled, "evt-1001-r3", "order.cancelled", "ord-1001", 3, "CANCELLED"), "evt-1001-r3", "applied"); err != nil {
				return "", err
			}
			_, err := p.effect(ctx, "orders", "ord-1001", "notify_cancel", "done")
			return "applied; notify_cancel done", err
		}},
		{"late r2: order.confirmed ord-1001 r2 after r3", func(ctx context.Context) (string, error) {
			err := p.sendDisposed(ctx, orderAt(confirmed, "evt-1001-r2", "order.confirmed", "ord-1001", 2, "CONFIRMED"), "evt-1001-r2", "stale")
			return "stale; no confirmation for a cancelled order", err
		}},
		{"confirm ord-1002 r1: the mail goes out", func(ctx context.Context) (string, error) {
			_, err := p.sendEffect(ctx, order("evt-1002-r1", "order.confirmed", "ord-1002", 1, "CONFIRMED"), "ord-1002", "confirm", "done")
			return "applied; confirm done (mailer 201)", err
		}},
		{"confirm ord-1008: the mailer loses the mail", func(ctx context.Context) (string, error) {
			_, err := p.sendEffect(ctx, order("evt-1008-r1", "order.confirmed", "ord-1008", 1, "CONFIRMED"), "ord-1008", "confirm", "done")
			return fmt.Sprintf("done (201); verification looks it up again after %s", d.VerifyAfter), err
		}},
		{"pay ord-1003: the CRM hangs after creating", func(ctx context.Context) (string, error) {
			e, err := p.sendEffect(ctx, order("evt-1003-r1", "order.paid", "ord-1003", 1, "PAID"), "ord-1003", "sync_crm", "done")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("timeout after %s, outcome unknown; the lookup found the contact: done after %d call(s)", d.CallTimeout, e.Attempts), nil
		}},
		{"pay ord-1004: the ledger hangs, no lookup", func(ctx context.Context) (string, error) {
			_, err := p.sendEffect(ctx, order("evt-1004-r1", "order.paid", "ord-1004", 1, "PAID"), "ord-1004", "post_ledger", "needs_reconciliation")
			return "needs_reconciliation: never resent blind; a person checks the ledger", err
		}},
		{"ship ord-1005: the carrier answers 429", func(ctx context.Context) (string, error) {
			e, err := p.sendEffect(ctx, order("evt-1005-r1", "order.shipped", "ord-1005", 1, "SHIPPED"), "ord-1005", "book_carrier", "done")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("retained for Retry-After: %ss, then done after %d calls", retryAfterSecond, e.Attempts), nil
		}},
		{"invoice ord-1006: the warehouse answers 422", func(ctx context.Context) (string, error) {
			e, err := p.sendEffect(ctx, order("evt-1006-r1", "order.invoiced", "ord-1006", 1, "INVOICED"), "ord-1006", "export_invoice", "dead")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("dead (%s), never retried: in the exception queue", e.ErrorClass), nil
		}},
		{"subscribe ord-1007: 200 with an error body", func(ctx context.Context) (string, error) {
			e, err := p.sendEffect(ctx, order("evt-1007-r1", "order.subscribed", "ord-1007", 1, "SUBSCRIBED"), "ord-1007", "subscribe", "dead")
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("dead (%s): a classify rule read the body", e.ErrorClass), nil
		}},
		{"cancel ord-1002 r2: undo the mail", func(ctx context.Context) (string, error) {
			_, err := p.sendEffect(ctx, order("evt-1002-r2", "order.cancelled", "ord-1002", 2, "CANCELLED"), "ord-1002", "confirm:compensate", "retry_wait", "dead")
			return "compensation created; the void endpoint answers 503: outstanding", err
		}},
		{"overdue ord-1009: dunning mail, deadline", func(ctx context.Context) (string, error) {
			_, err := p.sendEffect(ctx, order("evt-1009-r1", "order.overdue", "ord-1009", 1, "OVERDUE"), "ord-1009", "dunning_mail", "retry_wait")
			return fmt.Sprintf("the dunning service answers 503; the %s deadline will pass while it retries", d.Deadline), err
		}},
	}
}

// edgeSteps are the dossier's edges: a feedback loop, conflicting and
// empty revisions, an operator's resolution, an event no flow takes and
// a source API that is down.
func (p *player) edgeSteps() []step {
	d := p.d
	return []step{
		{"feedback loop: A -> B -> A, one causation", func(ctx context.Context) (string, error) {
			cause := func(hop int) http.Header {
				return http.Header{"X-Hookledger-Causation": {"cause-7"}, "X-Hookledger-Hop": {fmt.Sprint(hop)}}
			}
			for _, s := range []struct {
				source, id string
				rev, hop   int
			}{{"sys_a", "a-1", 1, 0}, {"sys_b", "b-1", 1, 1}, {"sys_a", "a-2", 2, 2}} {
				body := fmt.Sprintf(`{"eventId":%q,"type":"contact.updated","id":"c-1","rev":%d}`, s.id, s.rev)
				if err := p.send(ctx, s.source, body, cause(s.hop)); err != nil {
					return "", err
				}
				if _, err := p.settled(ctx, s.source, s.id); err != nil {
					return "", err
				}
			}
			err := p.until(ctx, "the loop block", func() (bool, error) {
				sig, err := p.signals(ctx)
				return sig["loop_blocks"].Value > 0, err
			})
			return "the second visit to a_to_b is blocked (loop_blocked)", err
		}},
		{"version conflict ord-1010: two states for r1", func(ctx context.Context) (string, error) {
			if err := p.sendDisposed(ctx, order("evt-1010-r1", "order.created", "ord-1010", 1, "CREATED"), "evt-1010-r1", "applied"); err != nil {
				return "", err
			}
			err := p.sendDisposed(ctx, order("evt-1010-r1-other", "order.confirmed", "ord-1010", 1, "CONFIRMED"), "evt-1010-r1-other", "dead_lettered")
			return "dead_lettered (version_conflict): the ledger keeps the first", err
		}},
		{"lost intent ord-1011 r2: no state in it", func(ctx context.Context) (string, error) {
			if err := p.sendDisposed(ctx, order("evt-1011-r1", "order.created", "ord-1011", 1, "CREATED"), "evt-1011-r1", "applied"); err != nil {
				return "", err
			}
			err := p.sendDisposed(ctx, order("evt-1011-r2", "order.updated", "ord-1011", 2, ""), "evt-1011-r2", "dead_lettered")
			return "dead_lettered; ord-1011 is stuck at r1 (revision lag)", err
		}},
		{"test event ord-1012, closed by an operator", func(ctx context.Context) (string, error) {
			if err := p.sendDisposed(ctx, order("evt-1012-r1", "order.created", "ord-1012", 1, ""), "evt-1012-r1", "dead_lettered"); err != nil {
				return "", err
			}
			if err := p.api(ctx, http.MethodPost, "/api/v1/events/resolve", map[string]string{
				"source": "shop", "event_id": "evt-1012-r1", "note": "a test order from the shop's staging system"}, nil); err != nil {
				return "", err
			}
			err := p.disposition(ctx, "shop", "evt-1012-r1", "resolved")
			return "dead_lettered, then resolved with a note (events resolve)", err
		}},
		{"customer.updated: no flow subscribes", func(ctx context.Context) (string, error) {
			body := fmt.Sprintf(`{"eventId":"evt-cus-1","type":"customer.updated","occurredAt":%q,"customer_id":"cus-1"}`,
				time.Now().UTC().Format(time.RFC3339Nano))
			err := p.sendDisposed(ctx, body, "evt-cus-1", "unrouted")
			return "unrouted: stored and acknowledged, nothing to do", err
		}},
		{"stock.changed sku-1: its source API is down", func(ctx context.Context) (string, error) {
			body := fmt.Sprintf(`{"eventId":"evt-sku-1","type":"stock.changed","occurredAt":%q,"sku":"sku-1"}`,
				time.Now().UTC().Format(time.RFC3339Nano))
			if err := p.send(ctx, "inventory", body, nil); err != nil {
				return "", err
			}
			if err := p.until(ctx, "a refetch of sku-1", func() (bool, error) {
				return p.dest.Calls("/inventory-api/skus/sku-1") > 0, nil
			}); err != nil {
				return "", err
			}
			ev, err := p.event(ctx, "inventory", "evt-sku-1")
			if err != nil {
				return "", err
			}
			if ev == nil || ev.Disposition != "accepted" {
				return "", fmt.Errorf("evt-sku-1 is %+v, want accepted while the refetch fails", ev)
			}
			return fmt.Sprintf("the refetch answers 503: accepted, retried every %s", d.Retry), nil
		}},
	}
}

// Play runs the steps, one line each, then waits until every signal has
// something to show and prints them.
func (p *player) Play(ctx context.Context) error {
	steps := p.steps()
	fmt.Fprintf(p.out, "Playing the recovery dossier (%d steps):\n", len(steps))
	for i, s := range steps {
		fmt.Fprintf(p.out, "  %2d. %-46s ", i+1, s.what)
		res, err := s.play(ctx)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(p.out, "interrupted")
				return ctx.Err()
			}
			fmt.Fprintln(p.out, "FAILED")
			return fmt.Errorf("step %d (%s): %w", i+1, s.what, err)
		}
		fmt.Fprintln(p.out, res)
	}
	fmt.Fprintf(p.out, "\nWaiting for the deadline (%s) and the verification (%s) to pass on the real clock...\n",
		d(p.d.Deadline), d(p.d.VerifyAfter))
	var sig map[string]signalJSON
	var order []string
	longest := p.wait + p.d.Deadline + p.d.VerifyAfter
	err := p.untilFor(ctx, longest, "every signal to have something to show", func() (bool, error) {
		var err error
		sig, order, err = p.signalList(ctx)
		if err != nil {
			return false, err
		}
		for _, s := range sig {
			if s.Value == 0 {
				return false, nil
			}
		}
		// A deadline that is near counts too; the demo waits for the miss.
		return len(sig) == 9 && sig["deadline_risk"].Breakdown["state"]["passed"] > 0, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(p.out, "\nThe nine outcome signals now (GET /api/v1/signals):\n")
	fmt.Fprintf(p.out, "  %-26s %6s  %-6s %s\n", "signal", "value", "status", "oldest")
	for _, name := range order {
		s := sig[name]
		oldest := "-"
		if s.OldestAge != nil {
			oldest = (time.Duration(*s.OldestAge * float64(time.Second))).Round(time.Second).String()
		}
		fmt.Fprintf(p.out, "  %-26s %6d  %-6s %s\n", s.Name, s.Value, s.Status, oldest)
	}
	return nil
}

func d(x time.Duration) string { return x.String() }

// send signs body as source's sender would and posts it; anything but a
// 200 is a failure of the step.
func (p *player) send(ctx context.Context, source, body string, extra http.Header) error {
	u := p.base + "/hooks/" + source
	var id struct {
		EventID string `json:"eventId"`
	}
	_ = json.Unmarshal([]byte(body), &id)
	if _, seen := p.sent[id.EventID]; !seen {
		p.sent[id.EventID] = body
	}
	hdr, err := p.schemes[source].Sign(&signature.Request{Method: http.MethodPost, URL: u, Body: []byte(body)}, time.Now(), id.EventID)
	if err != nil {
		return fmt.Errorf("sign for %s: %w", source, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("post to %s: %w", source, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("post to %s: %d %s", source, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// api calls the admin API with the admin token; out, when set, receives
// the JSON answer.
func (p *player) api(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

type eventJSON struct {
	Source      string `json:"source"`
	EventID     string `json:"event_id"`
	Deliveries  int    `json:"deliveries"`
	Disposition string `json:"disposition"`
}

func (p *player) event(ctx context.Context, source, eventID string) (*eventJSON, error) {
	var doc struct {
		Events []eventJSON `json:"events"`
	}
	q := url.Values{"source": {source}, "event_id": {eventID}}
	if err := p.api(ctx, http.MethodGet, "/api/v1/events?"+q.Encode(), nil, &doc); err != nil {
		return nil, err
	}
	if len(doc.Events) != 1 {
		return nil, nil
	}
	return &doc.Events[0], nil
}

// settled waits for an event to leave accepted and returns where it ended.
func (p *player) settled(ctx context.Context, source, eventID string) (string, error) {
	var disp string
	err := p.until(ctx, source+"/"+eventID+" to settle", func() (bool, error) {
		ev, err := p.event(ctx, source, eventID)
		if ev != nil {
			disp = ev.Disposition
		}
		return ev != nil && ev.Disposition != "accepted", err
	})
	return disp, err
}

// disposition waits for an event to settle and checks where.
func (p *player) disposition(ctx context.Context, source, eventID, want string) error {
	got, err := p.settled(ctx, source, eventID)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s/%s is %s, want %s", source, eventID, got, want)
	}
	return nil
}

type effectJSON struct {
	ID         int64  `json:"id"`
	Effect     string `json:"effect"`
	State      string `json:"state"`
	Attempts   int    `json:"attempts"`
	ErrorClass string `json:"error_class"`
	Owner      string `json:"owner"`
}

// effect waits for the entity's effect of that name to reach one of the
// states.
func (p *player) effect(ctx context.Context, flow, entity, name string, states ...string) (*effectJSON, error) {
	var found *effectJSON
	err := p.until(ctx, fmt.Sprintf("%s of %s to be %s", name, entity, strings.Join(states, " or ")), func() (bool, error) {
		var doc struct {
			Effects []effectJSON `json:"effects"`
		}
		q := url.Values{"flow": {flow}, "entity": {entity}, "state": {"any"}}
		if err := p.api(ctx, http.MethodGet, "/api/v1/effects?"+q.Encode(), nil, &doc); err != nil {
			return false, err
		}
		for i, e := range doc.Effects {
			if e.Effect == name && slices.Contains(states, e.State) {
				found = &doc.Effects[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

type signalJSON struct {
	Name      string                      `json:"name"`
	Value     int64                       `json:"value"`
	OldestAge *float64                    `json:"oldest_age_seconds"`
	Status    string                      `json:"status"`
	Breakdown map[string]map[string]int64 `json:"breakdown"`
}

func (p *player) signalList(ctx context.Context) (map[string]signalJSON, []string, error) {
	var doc struct {
		Signals []signalJSON `json:"signals"`
	}
	if err := p.api(ctx, http.MethodGet, "/api/v1/signals", nil, &doc); err != nil {
		return nil, nil, err
	}
	out := map[string]signalJSON{}
	var names []string
	for _, s := range doc.Signals {
		out[s.Name] = s
		names = append(names, s.Name)
	}
	return out, names, nil
}

func (p *player) signals(ctx context.Context) (map[string]signalJSON, error) {
	s, _, err := p.signalList(ctx)
	return s, err
}

func (p *player) until(ctx context.Context, what string, cond func() (bool, error)) error {
	return p.untilFor(ctx, p.wait, what, cond)
}

// untilFor polls cond until it holds, fails, ctx ends or limit passes.
func (p *player) untilFor(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(p.poll)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", limit, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
