package publish

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookledger/hookledger/internal/aimd"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
)

// endpointAction delivers one message to one endpoint: the stored body,
// byte for byte, with webhook-id = the message id on every attempt, and a
// fresh webhook-timestamp and signature list per attempt.
type endpointAction struct{ s *Service }

func (a *endpointAction) Do(ctx context.Context, c *deliver.Call) (*deliver.Response, error) {
	id := strings.TrimPrefix(c.Destination.Name, store.EndpointDestinationPrefix)
	e := a.s.endpoint(id)
	if e == nil {
		return &deliver.Response{}, fmt.Errorf("endpoint %s is not known to this process yet", id)
	}
	if !e.Enabled {
		// The worker read the destination before the endpoint was
		// disabled (a 410 to a message sent alongside, an operator): send
		// nothing. Not sent, so the message waits for its next retry and
		// parks then, as the disabled endpoint's destination says.
		return &deliver.Response{}, fmt.Errorf("endpoint %s was disabled before this delivery began", id)
	}
	msgID, ok := messageOf(c.EpisodeKey, id)
	if !ok {
		return &deliver.Response{}, fmt.Errorf("episode %s is not a delivery to endpoint %s", c.EpisodeKey, id)
	}
	now := a.s.clk.Now()
	var keys []string
	for _, sec := range e.Secrets {
		if sec.Active(now) {
			keys = append(keys, sec.Key)
		}
	}
	sig, err := signature.SignWebhook(keys, msgID, now, c.Body)
	if err != nil {
		// Never the keys: the error names the problem only.
		return &deliver.Response{}, fmt.Errorf("sign for endpoint %s: %w", id, err)
	}
	// The worker set webhook-id to the episode key (the idempotency
	// header); the receiver's dedupe key is the message id.
	c.Header.Set("webhook-id", msgID)
	c.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	c.Header.Set("webhook-signature", sig)
	c.Header.Set("Content-Type", "application/json")
	c.Header.Set("User-Agent", "hookledger")
	started := a.s.clk.Now()
	resp, err := a.s.http.Do(ctx, c)
	status := 0
	if resp != nil {
		status = resp.Status
	}
	if l := a.s.limit(c.Destination.Name); l != nil {
		l.Observe(started, a.s.clk.Now(), loadSignal(ctx, status, err))
	}
	a.s.delivered(context.WithoutCancel(ctx), id, status, err != nil || status < 200 || status > 299)
	return resp, err
}

// loadSignal is what a delivery's answer says about its endpoint's load
// (package aimd): a 2xx may let more deliveries in flight; a timeout, a
// failed connection, 429 or 503 halves them; anything else is an answer
// about the message, not the load. A call refused before it was sent (a
// non-public address) or cut short by this process stopping says nothing.
func loadSignal(ctx context.Context, status int, err error) aimd.Signal {
	switch {
	case err != nil && (ctx.Err() != nil || outbound.IsAddressError(err)):
		return aimd.Neutral
	case err != nil || status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return aimd.Overload
	case status >= 200 && status <= 299:
		return aimd.Success
	default:
		return aimd.Neutral
	}
}

// messageOf reads the message id out of a delivery's episode key.
func messageOf(episodeKey, endpointID string) (string, bool) {
	rest, ok := strings.CutPrefix(episodeKey, "publish:")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, ":"+endpointID)
}

// publishAction carries out a flow's effect sent to "endpoints": it
// publishes the message the effect's body holds. The message id and the
// Idempotency-Key are derived from the effect's episode key, so a second
// call for the same effect (after a crash, or a lost answer) finds the
// first message instead of publishing another (IP05).
type publishAction struct{ s *Service }

func (a *publishAction) Do(ctx context.Context, c *deliver.Call) (*deliver.Response, error) {
	m, fp, err := DecodeMessage(c.Body)
	if err != nil {
		body, _ := json.Marshal(map[string]string{"error": err.Error()})
		return &deliver.Response{Status: 422, Body: body, Sent: true}, nil
	}
	sum := sha256.Sum256([]byte(c.EpisodeKey))
	id := "msg_" + hex.EncodeToString(sum[:16])
	// The causation id as stored, not its header: that one is
	// percent-encoded for the wire.
	res, err := a.s.publish(ctx, id, "effect:"+c.EpisodeKey, fp, m, "flow", c.CausationID, 0)
	switch {
	case errors.Is(err, ErrTooLarge):
		// The same data is too large on every attempt.
		body, _ := json.Marshal(map[string]string{"error": err.Error()})
		return &deliver.Response{Status: 413, Body: body, Sent: true}, nil
	case err != nil:
		// Not stored: nothing was published, so the worker retries.
		return &deliver.Response{}, err
	}
	body, _ := json.Marshal(map[string]any{"id": res.ID, "endpoints": len(res.Endpoints), "replayed": res.Replayed})
	return &deliver.Response{Status: 202, Body: body, Sent: true}, nil
}
