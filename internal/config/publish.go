package config

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Publishing defaults (docs/publishing.md). The schedule follows the
// Standard Webhooks spec's example: the first attempt at once, then 5 s,
// 5 min, 30 min, 2 h, 5 h and every 10 h after that.
const (
	defaultPublishTimeout      = 15 * time.Second
	defaultIdempotencyWindow   = 24 * time.Hour
	defaultRotationOverlap     = 24 * time.Hour
	defaultDisableAfter        = 5 * 24 * time.Hour
	defaultWarnPayloadBytes    = 20 * 1024
	defaultMaxPayloadBytes     = 256 * 1024
	DefaultEndpointMaxInFlight = 16
	defaultEndpointRefresh     = 2 * time.Second
	defaultSlowAnswer          = time.Second
)

// DefaultSchedule is the wait before each retry of a message to an
// endpoint; the last one repeats.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour}

// Destination kinds built in besides "http".
const (
	// KindEndpoint delivers a message to one Standard Webhooks endpoint
	// (the destinations of the endpoints' effects are made at run time).
	KindEndpoint = "endpoint"
	// KindPublish is the built-in destination "endpoints": an effect sent
	// there publishes a message to every matching endpoint.
	KindPublish = "publish"
)

// publishDestination is the destination name a flow's effect names to
// publish a message to the endpoints.
const publishDestination = "endpoints"

// Publish tunes publishing to endpoints.
type Publish struct {
	// Timeout bounds one delivery to an endpoint (the spec asks for
	// 15–30 s).
	Timeout Duration `yaml:"timeout"`
	// Schedule is the wait before each retry; the last one repeats.
	Schedule []Duration `yaml:"schedule"`
	// DisableAfter disables an endpoint that has failed every delivery for
	// this long (a person is notified; its messages are parked).
	DisableAfter Duration `yaml:"disable_after"`
	// IdempotencyWindow is how long an Idempotency-Key of POST
	// /api/v1/messages is kept.
	IdempotencyWindow Duration `yaml:"idempotency_window"`
	// RotationOverlap is how long a rotated-out secret keeps signing.
	RotationOverlap Duration `yaml:"rotation_overlap"`
	// WarnPayloadBytes: a message above it is accepted with a warning.
	WarnPayloadBytes int64 `yaml:"warn_payload_bytes"`
	// MaxPayloadBytes: a message above it is refused with 413.
	MaxPayloadBytes int64 `yaml:"max_payload_bytes"`
	// MaxInFlight is an endpoint's default ceiling on deliveries in
	// flight. Each endpoint starts at one and rises toward it while it
	// answers fast (aimd); 1 delivers each endpoint's messages one at a
	// time, in the order they were published.
	MaxInFlight int `yaml:"max_in_flight"`
	// SlowAnswer: a success that took this long or longer does not let
	// an endpoint's deliveries in flight rise.
	SlowAnswer Duration `yaml:"slow_answer"`
	// Refresh is how often a process re-reads the endpoints another
	// process may have changed.
	Refresh Duration `yaml:"refresh"`
	// TracePropagation, unless false, sends the W3C traceparent and
	// tracestate of each delivery's attempt to the endpoints when tracing
	// is on, as a destination's trace_propagation does for its calls.
	TracePropagation *bool `yaml:"trace_propagation"`
}

// Attempts is how many deliveries of one message the schedule makes before
// the message goes to the exception queue: enough to keep trying for
// DisableAfter (by then a dead endpoint is disabled and parks it instead).
func (p *Publish) Attempts() int {
	total, n := time.Duration(0), 1
	for i := 0; total < p.DisableAfter.D() && n < 100; i++ {
		total += p.Schedule[min(i, len(p.Schedule)-1)].D()
		n++
	}
	return n
}

// ScheduleDurations returns the schedule as durations.
func (p *Publish) ScheduleDurations() []time.Duration {
	out := make([]time.Duration, len(p.Schedule))
	for i, d := range p.Schedule {
		out[i] = d.D()
	}
	return out
}

// EndpointConfig is an endpoint written in the config file. It is written
// to the store at start; the admin API can enable, disable and rotate it,
// but its other fields belong to the file.
type EndpointConfig struct {
	ID          string   `yaml:"id"`
	URL         string   `yaml:"url"`
	Description string   `yaml:"description"`
	Owner       string   `yaml:"owner"`
	Types       []string `yaml:"types"`
	// Enabled false disables the endpoint at every start; true (the
	// default) leaves it as it was (a 410 or an operator may have
	// disabled it).
	Enabled *bool `yaml:"enabled"`
	// Secrets sign every delivery: whsec_… (v1, HMAC-SHA256) or whsk_…
	// (v1a, ed25519). None: one is generated on first start and kept.
	Secrets              []string `yaml:"secrets"`
	AllowPrivateNetworks bool     `yaml:"allow_private_networks"`
	MaxInFlight          int      `yaml:"max_in_flight"`
	RateLimit            float64  `yaml:"rate_limit"`
}

var endpointID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidEndpointID reports whether id can name an endpoint (it appears in
// destination names, episode keys and URLs).
func ValidEndpointID(id string) bool { return endpointID.MatchString(id) }

var messageType = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)

// ValidMessageType reports whether t can be a message type.
func ValidMessageType(t string) bool { return messageType.MatchString(t) }

// ParseSecret checks a signing key and returns its kind and, for v1a, the
// public key as whpk_… (WH06: whsec_ keys are 24 to 64 bytes).
func ParseSecret(s string) (kind, public string, err error) {
	switch {
	case strings.HasPrefix(s, "whsec_"):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			return "", "", fmt.Errorf("a whsec_ secret must be base64 after the prefix")
		}
		if len(b) < 24 || len(b) > 64 {
			return "", "", fmt.Errorf("a whsec_ secret must hold 24 to 64 bytes, this one holds %d", len(b))
		}
		return store.SecretHMAC, "", nil
	case strings.HasPrefix(s, "whsk_"):
		b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsk_"))
		if err != nil {
			return "", "", fmt.Errorf("a whsk_ key must be base64 after the prefix")
		}
		var priv ed25519.PrivateKey
		switch len(b) {
		case ed25519.SeedSize:
			priv = ed25519.NewKeyFromSeed(b)
		case ed25519.PrivateKeySize:
			priv = ed25519.PrivateKey(b)
		default:
			return "", "", fmt.Errorf("a whsk_ key must hold an ed25519 seed (32 bytes) or private key (64 bytes), this one holds %d", len(b))
		}
		pub := priv.Public().(ed25519.PublicKey)
		return store.SecretEd25519, "whpk_" + base64.StdEncoding.EncodeToString(pub), nil
	default:
		return "", "", fmt.Errorf("a signing secret starts with whsec_ (v1, HMAC-SHA256) or whsk_ (v1a, ed25519)")
	}
}

func (c *Config) setPublishDefaults() {
	p := &c.Publish
	// 15 s unless the delivery lease is shorter: a call must end well
	// inside the lease, or it looks abandoned while still running.
	lease := c.Delivery.Lease.D()
	if lease <= 0 {
		lease = 2 * time.Minute // delivery's default, set after this
	}
	setDur(&p.Timeout, min(defaultPublishTimeout, lease/2))
	setDur(&p.DisableAfter, defaultDisableAfter)
	setDur(&p.IdempotencyWindow, defaultIdempotencyWindow)
	setDur(&p.RotationOverlap, defaultRotationOverlap)
	setDur(&p.Refresh, defaultEndpointRefresh)
	setDur(&p.SlowAnswer, defaultSlowAnswer)
	if p.Schedule == nil {
		for _, d := range DefaultSchedule {
			p.Schedule = append(p.Schedule, Duration(d))
		}
	}
	if p.WarnPayloadBytes == 0 {
		p.WarnPayloadBytes = defaultWarnPayloadBytes
	}
	if p.MaxPayloadBytes == 0 {
		p.MaxPayloadBytes = defaultMaxPayloadBytes
	}
	if p.MaxInFlight == 0 {
		p.MaxInFlight = DefaultEndpointMaxInFlight
	}
	// A flow that publishes sends its effects to the built-in destination
	// "endpoints"; it is added here so the flow engine and the worker find
	// it like any other, with the defaults below applied to it.
	uses := false
	for _, f := range c.Flows {
		for _, e := range f.Effects {
			uses = uses || e.Destination == publishDestination
		}
	}
	if uses {
		for _, d := range c.Destinations {
			if d.Name == publishDestination {
				return // validate refuses it
			}
		}
		c.Destinations = append(c.Destinations, Destination{Name: publishDestination, Kind: KindPublish, Builtin: true,
			Owner: "publishing", Timeout: Duration(10 * time.Second)})
	}
}

func (c *Config) validatePublish(add, warn func(path, format string, args ...any)) {
	p := &c.Publish
	if p.Timeout <= 0 || p.DisableAfter <= 0 || p.IdempotencyWindow <= 0 || p.RotationOverlap < 0 || p.Refresh <= 0 {
		add("$.publish", "publish durations must be positive")
	}
	if p.Timeout.D() >= c.Delivery.Lease.D() {
		add("$.publish.timeout", "publish.timeout (%s) must stay below delivery.lease (%s): a slower call would look abandoned", p.Timeout.D(), c.Delivery.Lease.D())
	}
	if len(p.Schedule) == 0 {
		add("$.publish.schedule", "publish.schedule needs at least one wait (the last one repeats)")
	}
	for i, d := range p.Schedule {
		if d <= 0 {
			add(fmt.Sprintf("$.publish.schedule[%d]", i), "publish.schedule[%d] must be positive", i)
		}
	}
	if p.WarnPayloadBytes < 0 || p.MaxPayloadBytes <= 0 || p.MaxPayloadBytes > 16<<20 {
		add("$.publish.max_payload_bytes", "publish.max_payload_bytes must be from 1 to 16 MiB and warn_payload_bytes positive")
	}
	if p.MaxInFlight < 1 || p.MaxInFlight > 1024 {
		add("$.publish.max_in_flight", "publish.max_in_flight must be from 1 to 1024")
	}
	if p.SlowAnswer < 0 {
		add("$.publish.slow_answer", "publish.slow_answer must be positive")
	}
	ids := map[string]int{}
	for i := range c.Endpoints {
		e := &c.Endpoints[i]
		ep := fmt.Sprintf("$.endpoints[%d]", i)
		switch {
		case e.ID == "":
			add(ep, "endpoints[%d]: id is required", i)
		case !ValidEndpointID(e.ID):
			add(ep+".id", "endpoint id %q: use letters, digits, '_', '.' and '-' (at most 64)", e.ID)
		default:
			if j, dup := ids[e.ID]; dup {
				add(ep+".id", "duplicate endpoint id %q (already used by endpoints[%d])", e.ID, j)
			}
			ids[e.ID] = i
		}
		CheckEndpointURL(func(format string, args ...any) { add(ep+".url", format, args...) }, e.URL)
		if u, err := url.Parse(e.URL); err == nil && !e.AllowPrivateNetworks {
			warnPrivateHost(warn, ep+".url", fmt.Sprintf("endpoint %q: url", e.ID), "allow_private_networks", u.Hostname())
		}
		for k, t := range e.Types {
			if err := store.CheckTypePattern(t); err != nil {
				add(fmt.Sprintf("%s.types[%d]", ep, k), "endpoint %q: %v", e.ID, err)
			}
		}
		for k, s := range e.Secrets {
			if _, _, err := ParseSecret(s); err != nil {
				// Never the value: it is a secret.
				add(fmt.Sprintf("%s.secrets[%d]", ep, k), "endpoint %q: secrets[%d]: %v", e.ID, k, err)
			}
		}
		if e.MaxInFlight < 0 || e.MaxInFlight > 1024 {
			add(ep+".max_in_flight", "endpoint %q: max_in_flight must be from 1 to 1024", e.ID)
		}
		if e.RateLimit < 0 {
			add(ep+".rate_limit", "endpoint %q: rate_limit must be positive (deliveries per second)", e.ID)
		}
	}
	for i, f := range c.Flows {
		if f.Name == store.PublishFlow {
			add(fmt.Sprintf("$.flows[%d].name", i), "flow name %q is reserved for the deliveries of published messages", f.Name)
		}
		for j, e := range f.Effects {
			ep := fmt.Sprintf("$.flows[%d].effects[%d]", i, j)
			if e.Destination != publishDestination {
				if e.Type != "" || e.Data != "" {
					add(ep, "flow %q: effect %q: type and data apply to destination %s only (publishing a message)", f.Name, e.Name, publishDestination)
				}
				continue
			}
			if !ValidMessageType(e.Type) {
				add(ep+".type", "flow %q: effect %q: type %q: a message type of letters, digits and '_', '.', ':', '/', '-' is required (for example invoice.paid)", f.Name, e.Name, e.Type)
			}
			if e.Data == "" {
				add(ep, "flow %q: effect %q: data is required: the expression whose value is the message's data", f.Name, e.Name)
			}
		}
	}
	for i, s := range c.Sources {
		if s.Name == store.PublishSource {
			add(fmt.Sprintf("$.sources[%d].name", i), "source name %q is reserved for published messages", s.Name)
		}
	}
}

// CheckEndpointURL reports what is wrong with an endpoint URL through
// fail, once; a good URL calls nothing.
func CheckEndpointURL(fail func(format string, args ...any), raw string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		fail("url is required")
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		fail("url %s is not an absolute http or https URL", strconv.Quote(raw))
	case u.User != nil:
		fail("url carries credentials (user:password@); deliveries are signed instead")
	case u.Fragment != "":
		fail("url has a fragment, which is never sent")
	}
}

// publishBody is the request body an effect sent to "endpoints" builds: a
// CEL map of the literal type and the data expression. The type is checked
// by ValidMessageType, so quoting it cannot break out of the literal.
func publishBody(typ, data string) string {
	return `{"type": ` + strconv.Quote(typ) + `, "data": (` + data + `)}`
}
