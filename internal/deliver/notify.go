package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
)

// Notification says an effect entered the exception queue.
type Notification struct {
	EffectID        int64
	EpisodeKey      string
	Destination     string
	State           store.EffectState
	Class           store.ErrorClass
	Reason          string
	SuggestedRepair string
	Owner           string
}

// Notifier tells a person about an effect that needs them.
type Notifier interface {
	Notify(ctx context.Context, n Notification) error
}

// webhookNotifier posts a Slack-compatible message ({"text": ...}) to a
// configured incoming-webhook URL.
type webhookNotifier struct {
	url    string
	cfg    config.Notifications
	client *http.Client
}

// newWebhookNotifier returns nil when no webhook is configured. The
// message is never sent on to an address a redirect names, nor to a
// non-public address unless notifications.allow_private_networks is set.
func newWebhookNotifier(cfg config.Notifications, client *http.Client) Notifier {
	if cfg.WebhookURL == "" {
		return nil
	}
	c := outbound.NoRedirects(client)
	if !cfg.AllowPrivateNetworks {
		c = outbound.Guard(client, outbound.GuardOptions{})
	}
	return &webhookNotifier{url: cfg.WebhookURL, cfg: cfg, client: c}
}

// Text renders the message.
func (n Notification) Text() string {
	owner := ""
	if n.Owner != "" {
		owner = " Owner: " + n.Owner + "."
	}
	if n.EffectID == 0 {
		// Not about one effect (Worker.Tell).
		return fmt.Sprintf("hookledger: %s: %s. Suggested repair: %s.%s", n.Destination, n.Reason, n.SuggestedRepair, owner)
	}
	return fmt.Sprintf("hookledger: effect %d (%s) to %s is %s [%s]: %s. Suggested repair: %s.%s Inspect: hookledger effects show %d",
		n.EffectID, n.EpisodeKey, n.Destination, n.State, n.Class, n.Reason, n.SuggestedRepair, owner, n.EffectID)
}

// Notify posts the message; the URL (which embeds a secret token in Slack's
// scheme) never appears in errors.
func (w *webhookNotifier) Notify(ctx context.Context, n Notification) error {
	body, err := json.Marshal(map[string]string{"text": n.Text()})
	if err != nil {
		return fmt.Errorf("encode notification: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notification request could not be built")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		// Only the cause below the *url.Error: in Slack's scheme the URL's
		// path is itself the secret, so no part of it is repeated.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("notification webhook unreachable: %w", outbound.RedactError(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notification webhook answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// maxQueuedNotifications bounds the messages waiting for the notification
// loop. The ledger already holds every effect's state durably; a message is
// a heads-up, so when a flood of failures outruns the chat webhook the
// excess is dropped with a count in the log rather than held in memory.
const maxQueuedNotifications = 1000

// notifyQueue sends notifications from a loop of its own, so a slow or dead
// chat webhook never holds a delivery slot.
type notifyQueue struct {
	n    Notifier
	log  *slog.Logger
	loop *loop.Loop

	mu      sync.Mutex
	pending []Notification
	dropped int
}

func newNotifyQueue(n Notifier, log *slog.Logger, clk clock.Clock, stage *health.Stage) *notifyQueue {
	q := &notifyQueue{n: n, log: log}
	q.loop = loop.New("notifications", q.step, loop.Options{PollInterval: time.Second, Logger: log, Clock: clk, Stage: stage})
	return q
}

func (q *notifyQueue) add(n Notification) {
	q.mu.Lock()
	if len(q.pending) >= maxQueuedNotifications {
		q.dropped++
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, n)
	q.mu.Unlock()
	q.loop.Wake()
}

// step sends what is queued. Errors are logged per message: one bad
// message must not hold back the others.
func (q *notifyQueue) step(ctx context.Context) (bool, error) {
	q.mu.Lock()
	batch, dropped := q.pending, q.dropped
	q.pending, q.dropped = nil, 0
	q.mu.Unlock()
	if dropped > 0 {
		q.log.Warn("notifications dropped: more effects needed a person than the notification webhook could take", "dropped", dropped)
	}
	for _, n := range batch {
		if err := q.n.Notify(ctx, n); err != nil {
			q.log.Error("notification failed", "episode", n.EpisodeKey, "err", err)
		}
	}
	return false, nil
}

// flush sends everything queued now, in the caller's goroutine.
func (q *notifyQueue) flush(ctx context.Context) { _, _ = q.step(ctx) }

func (q *notifyQueue) start(ctx context.Context) error { return q.loop.Start(ctx) }

// stop ends the loop, then sends what is still queued, within ctx.
func (q *notifyQueue) stop(ctx context.Context) error {
	err := q.loop.Stop(ctx)
	if ctx.Err() == nil {
		q.flush(ctx)
	}
	return err
}
