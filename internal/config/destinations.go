package config

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/vendors"
)

// DefaultMaxInFlight is a destination's (or a source API's) default cap on
// calls in flight: a quarter of the workers, so a destination that hangs
// until its timeout leaves three quarters of them to the others. Alone
// (peers counts the destinations, or source APIs, the workers serve) it
// has no other to leave slots to, and takes them all: capping it would
// only make fewer calls share each durable commit.
func DefaultMaxInFlight(workers, peers int) int {
	if peers <= 1 {
		return max(1, workers)
	}
	return max(1, workers/4)
}

// Error classes a classification rule may name.
var classes = []string{"success", "transient", "quota", "contention", "permanent", "hidden_failure"}

// Destination is a system effects are delivered to.
type Destination struct {
	Name    string `yaml:"name"`
	Preset  string `yaml:"preset"`
	Kind    string `yaml:"kind"`
	BaseURL string `yaml:"base_url"`
	Auth    *Auth  `yaml:"auth"`
	// Timeout bounds one call (connect to last byte).
	Timeout    Duration     `yaml:"timeout"`
	RateLimit  RateLimit    `yaml:"rate_limit"`
	Retry      RetryPolicy  `yaml:"retry"`
	RetryAfter RetryAfter   `yaml:"retry_after"`
	Idem       *Idempotency `yaml:"idempotency"`
	Lookup     *Lookup      `yaml:"lookup"`
	// Verify samples done effects and looks them up again (needs Lookup).
	Verify   *Verify        `yaml:"verify"`
	Classify []ClassifyRule `yaml:"classify"`
	// Owner is who repairs this destination's dead effects.
	Owner string `yaml:"owner"`
	// MaxInFlight caps this destination's calls in flight (a bulkhead):
	// one slow or dead destination then holds at most this many of the
	// delivery workers. 0 means the default (see DefaultMaxInFlight).
	MaxInFlight int `yaml:"max_in_flight"`
	// SendChangesOnly, when true, makes the flow processor create no
	// effect for this destination when the new state equals the
	// previously applied one. Unset takes the preset's (true for braze).
	SendChangesOnly *bool `yaml:"send_changes_only"`
	// DryRun sends every call to the preset's validation endpoint instead
	// of the live one (ga4-mp: /debug/mp/collect): the vendor records
	// nothing, and an effect that passes validation is done.
	DryRun bool `yaml:"dry_run"`
	// AllowPrivateNetworks lets calls reach loopback, private, link-local
	// and other non-public addresses (outbound.CheckAddr). Off, a base_url
	// or a DNS answer that leads into the network hookledger runs in is
	// refused when dialled, so a flow or a rebinding DNS name cannot reach
	// internal services or the cloud metadata address.
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
	// Signing, when set, signs every call with Standard Webhooks headers.
	Signing *Signing `yaml:"signing"`
	// TracePropagation, unless false, sends the W3C traceparent and
	// tracestate headers of the attempt's span with every call when
	// tracing is on (docs/tracing.md). A destination that refuses unknown
	// headers, or one outside the organisation, turns it off.
	TracePropagation *bool `yaml:"trace_propagation"`

	Compiled   *CompiledDest   `yaml:"-"`
	PresetData *vendors.Preset `yaml:"-"`
	// Builtin marks a destination hookledger made itself (the publishing
	// destination "endpoints", and one per endpoint at run time), which
	// the file's rules for base_url and names do not apply to.
	Builtin bool `yaml:"-"`
	// Schedule, when set, replaces the exponential backoff: the wait
	// before each retry, the last one repeating (endpoints).
	Schedule []time.Duration `yaml:"-"`
	// Paused, when set, parks every effect claimed for this destination
	// in the exception queue with this reason instead of calling
	// (a disabled endpoint).
	Paused string `yaml:"-"`
	// ParkRepair is the suggested repair of a parked effect.
	ParkRepair string `yaml:"-"`
}

// Auth is how calls authenticate; set exactly one way.
type Auth struct {
	Bearer string      `yaml:"bearer"`
	Basic  *BasicAuth  `yaml:"basic"`
	Header *HeaderAuth `yaml:"header"`
}

// BasicAuth is HTTP basic authentication.
type BasicAuth struct {
	User     string `yaml:"user"`
	Password string `yaml:"password"`
}

// HeaderAuth sends a credential in a named header.
type HeaderAuth struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// RateLimit is a token bucket shared by first calls and retries, so one
// failing destination cannot flood itself or starve the others (RT04).
type RateLimit struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

// RetryPolicy is exponential backoff with full jitter, then the exception
// queue with scheduled re-drives, then a person.
type RetryPolicy struct {
	Base     Duration   `yaml:"base"`
	Factor   float64    `yaml:"factor"`
	Cap      Duration   `yaml:"cap"`
	Attempts int        `yaml:"attempts"`
	Redrive  []Duration `yaml:"redrive"`
}

// RetryAfter says how to read the destination's Retry-After (RT05).
type RetryAfter struct {
	Unit string   `yaml:"unit"`
	Max  Duration `yaml:"max"`
}

// What a destination's idempotency header carries (Idempotency.Key).
const (
	// IdempotencyKeyHashed sends a fixed-length digest of the episode key
	// (docs/delivery.md, "Idempotency keys").
	IdempotencyKeyHashed = "hashed"
	// IdempotencyKeyEpisode sends the episode key as it is, unless it is
	// longer than the preset's documented limit or holds a character no
	// header may carry: then it is sent hashed.
	IdempotencyKeyEpisode = "episode"
)

// idempotencyKeys are the values idempotency.key takes.
var idempotencyKeys = []string{IdempotencyKeyHashed, IdempotencyKeyEpisode}

// Idempotency is the destination's own dedupe on a request header (IP07).
// A block that leaves a field out takes the preset's: a stripe
// destination may say only idempotency: {key: episode}.
type Idempotency struct {
	Header string   `yaml:"header"`
	Window Duration `yaml:"window"`
	// Key is what the header carries: IdempotencyKeyHashed or
	// IdempotencyKeyEpisode. Unset, the preset's (hashed for presets whose
	// vendor limits the key's length or asks for keys without personal
	// data), else episode. A destination made at run time leaves it empty,
	// which reads as episode.
	Key string `yaml:"key"`
	// ReplayedHeader names the answer header by which the destination says
	// it replayed the saved answer of an earlier request with the same key
	// (Stripe: Idempotent-Replayed: true). A replayed 5xx is the first
	// attempt's failure again: every retry under the key inside its window
	// would get it too, so the effect goes to the exception queue at once.
	ReplayedHeader string `yaml:"replayed_header"`
}

// Lookup finds an effect at the destination by its natural key, to settle
// an unknown outcome without a blind resend (IP04).
type Lookup struct {
	Method string `yaml:"method"`
	Path   string `yaml:"path"`
	// Query is a map expression of query parameters, escaped by the
	// request builder.
	Query string `yaml:"query"`
	Found string `yaml:"found"`
	Ref   string `yaml:"ref"`
}

// Verify is continuous verification: a background verifier looks up a
// deterministic share of this destination's done effects some time after
// they were done, with the destination's lookup, and records any the
// destination does not hold as a reconciliation mismatch.
type Verify struct {
	// Sample is the share of done effects looked up, in (0, 1].
	Sample float64 `yaml:"sample"`
	// After is how long after an effect is done it is looked up (default
	// DefaultVerifyAfter): long enough for the destination's own
	// replication or indexing to show it.
	After Duration `yaml:"after"`
	// PerSecond bounds the verifier's lookups at this destination
	// (default 1), apart from the delivery calls' rate_limit.
	PerSecond float64 `yaml:"per_second"`
}

// defaultVerifyAfter is how long after an effect is done the verifier
// looks it up, when verify.after is not set.
const defaultVerifyAfter = 5 * time.Minute

// ClassifyRule classifies an answer beyond its status (RT03).
type ClassifyRule struct {
	Status       int    `yaml:"status"`
	BodyContains string `yaml:"body_contains"`
	When         string `yaml:"when"`
	Class        string `yaml:"class"`
	Reason       string `yaml:"reason"`
	// Repair is the suggested repair of an effect the rule sends to the
	// exception queue (class permanent or hidden_failure).
	Repair string `yaml:"repair"`
}

// ChangesOnly reports whether effects for this destination are created
// only when the state changed (send_changes_only, or the preset's).
func (d *Destination) ChangesOnly() bool {
	return d.SendChangesOnly != nil && *d.SendChangesOnly
}

// PropagatesTrace reports whether calls carry the trace context (on unless
// trace_propagation is false).
func (d *Destination) PropagatesTrace() bool {
	return d.TracePropagation == nil || *d.TracePropagation
}

// CompiledDest holds a destination's compiled expressions.
type CompiledDest struct {
	LookupPath, LookupQuery, LookupFound, LookupRef *expr.Program
	Rules                                           []*expr.Program // per Classify rule; nil when it has no when
}

// Notifications configures the message sent when an effect needs a person.
type Notifications struct {
	WebhookURL string   `yaml:"webhook_url"`
	Timeout    Duration `yaml:"timeout"`
	// AllowPrivateNetworks lets the webhook reach a non-public address
	// (a chat relay on the internal network), as on destinations.
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
}

func (c *Config) setDestinationDefaults() {
	if c.Delivery.Workers == 0 {
		c.Delivery.Workers = DefaultWorkers
	}
	setDur(&c.Delivery.Lease, 2*time.Minute)
	setDur(&c.Delivery.PollInterval, 200*time.Millisecond)
	if c.Notifications.Timeout == 0 {
		c.Notifications.Timeout = Duration(5 * time.Second)
	}
	for i := range c.Destinations {
		d := &c.Destinations[i]
		if d.Preset == "" {
			d.Preset = "generic"
		}
		if d.Kind == "" {
			d.Kind = "http"
		}
		setDur(&d.Timeout, 10*time.Second)
		r := &d.Retry
		setDur(&r.Base, time.Second)
		if r.Factor == 0 {
			r.Factor = 2
		}
		setDur(&r.Cap, 60*time.Second)
		if r.Attempts == 0 {
			r.Attempts = 6
		}
		if r.Redrive == nil {
			r.Redrive = []Duration{Duration(15 * time.Minute), Duration(time.Hour), Duration(6 * time.Hour)}
		}
		setDur(&d.RetryAfter.Max, time.Hour)
		if p, ok := vendors.PresetByName(d.Preset); ok {
			d.PresetData = &p
			if d.RetryAfter.Unit == "" {
				d.RetryAfter.Unit = string(p.RetryAfterUnit)
			}
			d.setIdempotencyDefaults(p)
			if rate, burst, ok := p.Budget.Bucket(); ok && d.RateLimit.PerSecond == 0 && d.RateLimit.Burst == 0 {
				// The vendor's documented budget, as a bucket that never
				// exceeds it: without one, a backlog after an outage would
				// be sent as fast as the workers go and answered with 429s.
				d.RateLimit = RateLimit{PerSecond: rate, Burst: burst}
			}
			if d.SendChangesOnly == nil {
				v := p.SendChangesOnly
				d.SendChangesOnly = &v
			}
		}
		if d.RetryAfter.Unit == "" {
			d.RetryAfter.Unit = "seconds"
		}
		if d.Idem != nil && d.Idem.Key == "" {
			d.Idem.Key = IdempotencyKeyEpisode
		}
		if d.Lookup != nil && d.Lookup.Method == "" {
			d.Lookup.Method = "GET"
		}
		if v := d.Verify; v != nil {
			setDur(&v.After, defaultVerifyAfter)
			if v.PerSecond == 0 {
				v.PerSecond = 1
			}
		}
	}
}

// setIdempotencyDefaults fills what the idempotency block leaves out from
// the preset: all of it when the block is missing. The preset's replayed
// header goes with its own header only: it says nothing about another.
func (d *Destination) setIdempotencyDefaults(p vendors.Preset) {
	if p.IdempotencyHeader == "" {
		return
	}
	if d.Idem == nil {
		d.Idem = &Idempotency{}
	}
	i := d.Idem
	if i.Header == "" {
		i.Header = p.IdempotencyHeader
	}
	if i.Window == 0 {
		i.Window = Duration(p.IdempotencyWindow)
	}
	if i.ReplayedHeader == "" && strings.EqualFold(i.Header, p.IdempotencyHeader) {
		i.ReplayedHeader = p.IdempotencyReplayedHeader
	}
	if i.Key == "" && p.HashIdempotencyKey {
		i.Key = IdempotencyKeyHashed
	}
}

// validateDestinations checks the notification and delivery settings and
// every destination, then that each effect names a destination that is
// configured and that its body fits that destination's object limits.
func (c *Config) validateDestinations(add, warn func(path, format string, args ...any)) {
	c.validateNotifications(add, warn)
	if c.Delivery.Workers < 0 || c.Delivery.Workers > 1024 {
		add("$.delivery.workers", "delivery.workers must be from 1 to 1024")
	}
	if c.Delivery.Lease < 0 || c.Delivery.PollInterval < 0 {
		add("$.delivery", "delivery durations must be positive")
	}
	longest := time.Duration(0)
	names := map[string]int{}
	for i := range c.Destinations {
		d := &c.Destinations[i]
		longest = max(longest, d.Timeout.D())
		p := fmt.Sprintf("$.destinations[%d]", i)
		checkDestinationName(add, p, i, d, names)
		checkDestination(add, warn, p, d)
	}
	if longest > 0 && c.Delivery.Lease.D() <= longest {
		add("$.delivery.lease", "delivery.lease (%s) must exceed the longest destination timeout (%s): otherwise a slow call looks abandoned and is reconciled while still running", c.Delivery.Lease.D(), longest)
	}
	for i, f := range c.Flows {
		for j, e := range f.Effects {
			if e.Destination != "" {
				k, ok := names[e.Destination]
				if !ok {
					// An effect nobody can deliver would wait in approved
					// forever, out of the exception queue's sight.
					what := fmt.Sprintf("effect %q", e.Name)
					if f.Forward != nil {
						what = "forward"
					}
					add(f.effectPath(i, j, "destination"),
						"flow %q: %s: no destination named %q is configured (destinations: %s)", f.Name, what, e.Destination, strings.Join(sortedKeys(names), ", "))
					continue
				}
				if f.Compiled != nil && j < len(f.Compiled.Effects) {
					checkObjectCount(add, fmt.Sprintf("$.flows[%d].effects[%d].request.body", i, j),
						fmt.Sprintf("flow %q: effect %q", f.Name, e.Name), &c.Destinations[k], f.Compiled.Effects[j].Body)
				}
			}
		}
	}
}

// validateNotifications checks the webhook that operator notifications go
// to.
func (c *Config) validateNotifications(add, warn addFunc) {
	if c.Notifications.WebhookURL == "" {
		return
	}
	// Never repeated in a message: in Slack's scheme the URL itself is
	// the secret.
	if u, err := url.Parse(c.Notifications.WebhookURL); err != nil || u.Scheme == "" || u.Host == "" {
		add("$.notifications.webhook_url", "notifications.webhook_url is not an absolute URL")
	} else if u.User != nil {
		add("$.notifications.webhook_url", "notifications.webhook_url carries credentials (user:password@), which would show wherever the URL does; use a webhook whose URL alone authorizes it, as Slack's incoming webhooks do")
	} else if !c.Notifications.AllowPrivateNetworks {
		warnPrivateHost(warn, "$.notifications.webhook_url", "notifications.webhook_url", "notifications.allow_private_networks", u.Hostname())
	}
}

// checkDestinationName checks destinations[i]'s name and records it in
// names, so that a duplicate names the first and effects can look it up.
func checkDestinationName(add addFunc, p string, i int, d *Destination, names map[string]int) {
	switch {
	case d.Name == "":
		add(p, "destinations[%d]: name is required", i)
	case !validSourceName(d.Name):
		add(p+".name", "destination name %q: use lowercase letters, digits, '-' and '_'", d.Name)
	case d.Name == publishDestination && !d.Builtin:
		add(p+".name", "destination name %q is reserved: an effect sent to it publishes a message to the endpoints (docs/publishing.md)", d.Name)
	default:
		if j, dup := names[d.Name]; dup {
			add(p+".name", "duplicate destination name %q (already used by destinations[%d])", d.Name, j)
		} else {
			names[d.Name] = i
		}
	}
}

// checkDestination checks one destination's settings and stores its
// compiled expressions.
func checkDestination(add, warn addFunc, p string, d *Destination) {
	if d.PresetData == nil {
		add(p+".preset", "destination %q: unknown preset %q (one of %s)", d.Name, d.Preset, strings.Join(vendors.PresetNames(), ", "))
	}
	if d.Kind == "http" {
		checkBaseURL(add, p+".base_url", fmt.Sprintf("destination %q: base_url", d.Name), d.BaseURL,
			"put them in auth: (bearer, basic or header), which sends them in headers only")
		if u, err := url.Parse(d.BaseURL); err == nil && !d.AllowPrivateNetworks {
			warnPrivateHost(warn, p+".base_url", fmt.Sprintf("destination %q: base_url", d.Name), "allow_private_networks", u.Hostname())
		}
	}
	checkDestinationAuth(add, p, d)
	checkSigning(add, p, d)
	if d.Timeout < 0 {
		add(p+".timeout", "destination %q: timeout must be positive", d.Name)
	}
	if d.MaxInFlight < 0 {
		add(p+".max_in_flight", "destination %q: max_in_flight must be positive (0 takes the default, a quarter of delivery.workers)", d.Name)
	}
	checkRateLimit(add, warn, p, d)
	checkDryRun(add, warn, p, d)
	checkRetry(add, p, d)
	checkIdempotency(add, warn, p, d)
	d.Compiled = compileDestination(add, p, d)
}

// checkDestinationAuth checks the auth block: exactly one way to
// authenticate, each a valid header.
func checkDestinationAuth(add addFunc, p string, d *Destination) {
	a := d.Auth
	if a == nil {
		return
	}
	n := 0
	if a.Bearer != "" {
		n++
	}
	if a.Basic != nil {
		n++
	}
	if a.Bearer != "" {
		checkStaticHeader(add, p+".auth.bearer", fmt.Sprintf("destination %q: auth.bearer", d.Name), "", a.Bearer)
	}
	if a.Header != nil {
		n++
		if a.Header.Name == "" {
			add(p+".auth.header", "destination %q: auth.header needs a name", d.Name)
		} else {
			checkStaticHeader(add, p+".auth.header", fmt.Sprintf("destination %q: auth.header", d.Name), a.Header.Name, a.Header.Value)
		}
	}
	if n != 1 {
		add(p+".auth", "destination %q: auth needs exactly one of bearer, basic or header", d.Name)
	}
}

// checkRateLimit checks the rate limit and warns when it lets more calls
// through than the vendor's documented budget.
func checkRateLimit(add, warn addFunc, p string, d *Destination) {
	if d.RateLimit.PerSecond < 0 || d.RateLimit.Burst < 0 {
		add(p+".rate_limit", "destination %q: rate_limit values must be positive", d.Name)
	} else if pd := d.PresetData; pd != nil && pd.Budget.Requests > 0 && d.RateLimit.PerSecond > 0 {
		// The worker's default burst is one second of calls.
		burst := d.RateLimit.Burst
		if burst <= 0 {
			burst = max(1, int(d.RateLimit.PerSecond))
		}
		if most := d.RateLimit.PerSecond*pd.Budget.Per.Seconds() + float64(burst); most > float64(pd.Budget.Requests) {
			warn(p+".rate_limit", "destination %q: rate_limit allows up to %.0f calls in %s, above the %d %s documents (leave rate_limit out for a bucket that stays inside it)",
				d.Name, most, pd.Budget.Per, pd.Budget.Requests, pd.Title)
		}
	}
}

// checkDryRun checks dry_run, which needs a preset with a validation
// endpoint, and warns that nothing reaches the vendor while it is on.
func checkDryRun(add, warn addFunc, p string, d *Destination) {
	if !d.DryRun {
		return
	}
	if pd := d.PresetData; pd == nil || pd.Validation == nil {
		add(p+".dry_run", "destination %q: dry_run needs a preset with a validation endpoint (%s)", d.Name, strings.Join(validatingPresets(), ", "))
	} else if d.Kind != "http" {
		add(p+".dry_run", "destination %q: dry_run needs kind http: a custom action makes its own calls", d.Name)
	} else {
		warn(p+".dry_run", "destination %q: dry_run: every call goes to %s instead of %s; nothing reaches %s, and an effect that passes validation is done and never sent for real: use it with a trial store",
			d.Name, pd.Validation.PathTo, pd.Validation.PathFrom, pd.Title)
	}
}

// checkRetry checks the retry schedule, its re-drive delays and the unit
// of the vendor's Retry-After.
func checkRetry(add addFunc, p string, d *Destination) {
	r := d.Retry
	if r.Base <= 0 || r.Cap < r.Base || r.Factor < 1 || r.Attempts < 1 || r.Attempts > 100 {
		add(p+".retry", "destination %q: retry needs base > 0, cap >= base, factor >= 1 and attempts from 1 to 100", d.Name)
	}
	for k, rd := range r.Redrive {
		if rd <= 0 {
			add(fmt.Sprintf("%s.retry.redrive[%d]", p, k), "destination %q: re-drive delays must be positive", d.Name)
		}
	}
	if !slices.Contains([]string{"seconds", "milliseconds"}, d.RetryAfter.Unit) {
		add(p+".retry_after.unit", "destination %q: retry_after.unit %q is not seconds or milliseconds", d.Name, d.RetryAfter.Unit)
	}
}

// compileDestination compiles the destination's lookup, verify and
// classify expressions.
func compileDestination(add addFunc, p string, d *Destination) *CompiledDest {
	cd := &CompiledDest{}
	compile := func(field, src string, required bool) *expr.Program {
		if src == "" {
			if required {
				add(p, "destination %q: %s is required", d.Name, field)
			}
			return nil
		}
		prog, err := expr.Compile(src)
		if err != nil {
			add(p+"."+field, "destination %q: %s: %v", d.Name, field, err)
			return nil
		}
		return prog
	}
	if l := d.Lookup; l != nil {
		cd.LookupPath = compile("lookup.path", l.Path, true)
		checkPathExpr(add, p+".lookup.path", fmt.Sprintf("destination %q: lookup.path", d.Name), cd.LookupPath)
		cd.LookupQuery = compile("lookup.query", l.Query, false)
		checkQueryExpr(add, p+".lookup.query", fmt.Sprintf("destination %q: lookup.query", d.Name), cd.LookupQuery)
		cd.LookupFound = compile("lookup.found", l.Found, true)
		cd.LookupRef = compile("lookup.ref", l.Ref, false)
		checkLookupKey(add, p, d, cd)
	}
	checkVerify(add, p, d)
	compileClassify(add, p, d, cd)
	return cd
}

// compileClassify checks the classify rules, which sort a vendor's answers
// into classes, and compiles their when expressions into cd.Rules.
func compileClassify(add addFunc, p string, d *Destination, cd *CompiledDest) {
	for k, rule := range d.Classify {
		rp := fmt.Sprintf("%s.classify[%d]", p, k)
		if !slices.Contains(classes, rule.Class) {
			add(rp+".class", "destination %q: class %q is not one of %s", d.Name, rule.Class, strings.Join(classes, ", "))
		}
		if rule.Repair != "" && rule.Class != "permanent" && rule.Class != "hidden_failure" {
			// The worker retries every other class; the repair would
			// never be shown.
			add(rp+".repair", "destination %q: a repair is shown only with class permanent or hidden_failure, not %s", d.Name, rule.Class)
		}
		if rule.Status == 0 && rule.BodyContains == "" && rule.When == "" {
			add(rp, "destination %q: a classify rule needs status, body_contains or when", d.Name)
		}
		var prog *expr.Program
		if rule.When != "" {
			var err error
			if prog, err = expr.Compile(rule.When); err != nil {
				add(rp+".when", "destination %q: classify when: %v", d.Name, err)
			}
		}
		cd.Rules = append(cd.Rules, prog)
	}
}

// checkIdempotency refuses an idempotency block the worker could not
// send, and warns when key: episode is asked of a vendor that wants keys
// without personal data: the episode key holds the entity id.
func checkIdempotency(add, warn addFunc, p string, d *Destination) {
	i := d.Idem
	if i == nil {
		return
	}
	preset := "generic"
	if d.PresetData != nil {
		preset = d.PresetData.Name
	}
	switch {
	case i.Header == "":
		add(p+".idempotency.header", "destination %q: idempotency needs a header (the request header the destination dedupes on; preset %s names none)", d.Name, preset)
	default:
		checkStaticHeader(add, p+".idempotency.header", fmt.Sprintf("destination %q: idempotency.header", d.Name), i.Header, "")
	}
	if i.Window <= 0 {
		add(p+".idempotency.window", "destination %q: idempotency needs a positive window (how long the destination keeps keys; preset %s states none)", d.Name, preset)
	}
	if !slices.Contains(idempotencyKeys, i.Key) {
		add(p+".idempotency.key", "destination %q: idempotency.key %q is not one of hashed (a fixed-length digest of the episode key) or episode (the episode key as it is)", d.Name, i.Key)
	}
	if pd := d.PresetData; pd != nil && i.Key == IdempotencyKeyEpisode && pd.HashIdempotencyKey && strings.EqualFold(i.Header, pd.IdempotencyHeader) {
		limit := ""
		if pd.IdempotencyKeyMax > 0 {
			limit = fmt.Sprintf("; an episode key over its limit of %d characters is sent hashed all the same", pd.IdempotencyKeyMax)
		}
		warn(p+".idempotency.key", "destination %q: idempotency.key: episode sends %s the episode key, which holds the entity id from the payload (an e-mail address, say), "+
			"where the vendor asks for keys without personal data%s (docs/delivery.md#idempotency-keys)", d.Name, pd.Title, limit)
	}
}

// checkLookupKey refuses a lookup that reads idempotency_key on a
// destination that is sent none: it would always search for "".
func checkLookupKey(add addFunc, p string, d *Destination, cd *CompiledDest) {
	if d.Idem != nil {
		return
	}
	for _, e := range []struct {
		field string
		prog  *expr.Program
	}{{"path", cd.LookupPath}, {"query", cd.LookupQuery}, {"found", cd.LookupFound}, {"ref", cd.LookupRef}} {
		if e.prog != nil && e.prog.Reads(expr.VarIdempotencyKey) {
			add(p+".lookup."+e.field, "destination %q: lookup.%s reads idempotency_key, but the destination is sent no idempotency key (it has no idempotency: header); search by episode_key, or configure idempotency:", d.Name, e.field)
		}
	}
}

// checkVerify refuses a verify: block the verifier could not carry out:
// without a lookup it has no way to ask the destination.
func checkVerify(add addFunc, p string, d *Destination) {
	v := d.Verify
	if v == nil {
		return
	}
	if d.Lookup == nil {
		add(p+".verify", "destination %q: verify needs a lookup: (the verifier asks the destination for each sampled effect with it)", d.Name)
	}
	// NaN fails both comparisons, so it is refused too.
	if !(v.Sample > 0 && v.Sample <= 1) {
		add(p+".verify.sample", "destination %q: verify.sample must be a share in (0, 1], e.g. 0.01 for one effect in a hundred", d.Name)
	}
	if v.After < 0 {
		add(p+".verify.after", "destination %q: verify.after must be positive (default %s)", d.Name, defaultVerifyAfter)
	}
	if !(v.PerSecond > 0) || math.IsInf(v.PerSecond, 0) {
		add(p+".verify.per_second", "destination %q: verify.per_second must be a positive number of lookups per second (default 1)", d.Name)
	}
}

// checkObjectCount refuses a constant request body that carries more
// objects than the destination's vendor accepts in one request (Braze: 75
// across attributes, events and purchases): every call would be refused.
// A body built from the payload can only be counted when the call is
// made; the vendor's refusal is permanent then.
func checkObjectCount(add addFunc, at, what string, d *Destination, body *expr.Program) {
	pd := d.PresetData
	if pd == nil || pd.MaxObjects <= 0 || body == nil || !body.Constant() {
		return
	}
	raw, err := body.EvalJSON(nil)
	if err != nil {
		return // the request builder reports it
	}
	v, err := expr.DecodeJSON(raw)
	if err != nil {
		return
	}
	if n := countObjects(v, pd.ObjectArrays); n > pd.MaxObjects {
		add(at, "%s: request.body carries %d objects in %s; %s accepts at most %d per request, and hookledger does not split requests",
			what, n, strings.Join(pd.ObjectArrays, ", "), pd.Title, pd.MaxObjects)
	}
}

// countObjects counts the elements of the named top-level arrays of a
// decoded JSON body.
func countObjects(body any, arrays []string) int {
	m, ok := body.(map[string]any)
	if !ok {
		return 0
	}
	n := 0
	for _, name := range arrays {
		if a, ok := m[name].([]any); ok {
			n += len(a)
		}
	}
	return n
}

// validatingPresets names the presets with a validation endpoint.
func validatingPresets() []string {
	var out []string
	for _, p := range vendors.Presets() {
		if p.Validation != nil {
			out = append(out, p.Name)
		}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return []string{"none"}
	}
	return keys
}

// checkBaseURL refuses a base URL that is not absolute http(s), or that
// carries userinfo: credentials in a URL end up wherever the URL is shown
// (transport errors, reasons, logs), while credentials in headers do not.
// The message repeats the URL without userinfo or query string.
func checkBaseURL(add func(path, format string, args ...any), path, what, raw, instead string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Scheme == "" || u.Host == "":
		add(path, "%s %q is not an absolute URL", what, outbound.RedactURL(raw))
	case u.Scheme != "http" && u.Scheme != "https":
		add(path, "%s %q: the scheme must be http or https", what, outbound.RedactURL(raw))
	case u.User != nil:
		add(path, "%s %q carries credentials (user:password@), which would show in errors and logs: %s", what, outbound.RedactURL(raw), instead)
	}
}

// warnPrivateHost warns about a URL whose host is written as a non-public
// address (or is localhost) while key is off: every call to it will be
// refused when dialled, and saying so at load time saves a trip to the
// exception queue. A name that resolves to one can only be caught then.
func warnPrivateHost(warn func(path, format string, args ...any), path, what, key, host string) {
	rule := ""
	if ip, err := netip.ParseAddr(host); err == nil {
		rule = outbound.CheckAddr(ip)
	} else if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		rule = "loopback"
	}
	if rule != "" {
		warn(path, "%s names %s, which is not a public address (%s): every call to it is refused when dialled unless %s: true is set (for a service meant to be reached on an internal network)", what, host, rule, key)
	}
}
