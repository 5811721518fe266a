package config

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/senderkind"
)

// Version modes of a flow.
const (
	ModeRevision   = "revision"
	ModeRefetch    = "refetch"
	ModeOccurredAt = "occurred_at"
)

// Defaults of the causation block.
const (
	defaultCausationHeader = "X-Hookledger-Causation"
	defaultHopHeader       = "X-Hookledger-Hop"
	defaultMaxHops         = 4
)

// Causation configures the feedback-loop guard: the headers that carry a
// causation id and hop count in and out, and the hop ceiling.
type Causation struct {
	Header    string `yaml:"header"`
	HopHeader string `yaml:"hop_header"`
	MaxHops   int    `yaml:"max_hops"`
	// TrustedSources are the sources whose requests may carry the causation
	// headers: senders that hookledger's own effects call and that pass the
	// headers back (your own apps). No signature scheme covers these
	// headers, so from any other source they are ignored: a forged
	// causation id could otherwise settle a real event as a loop duplicate,
	// and a forged hop count could dead-letter it.
	TrustedSources []string `yaml:"trusted_sources"`
}

// SourceAPI is a source's own API, read by refetch flows.
type SourceAPI struct {
	BaseURL     string            `yaml:"base_url"`
	BearerToken string            `yaml:"bearer_token"`
	Headers     map[string]string `yaml:"headers"`
	Timeout     Duration          `yaml:"timeout"`
	// MaxInFlight caps the entities refetching from this API at once (a
	// bulkhead): a slow API then holds at most this many processing
	// workers. 0 means the default (see DefaultMaxInFlight).
	MaxInFlight int `yaml:"max_in_flight"`
	// AllowPrivateNetworks lets refetches reach a non-public address, as
	// on destinations: off, the API's address is checked when dialled.
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
}

// Flow turns one source's events into a projection and effects.
type Flow struct {
	Name    string      `yaml:"name"`
	Source  string      `yaml:"source"`
	Events  []string    `yaml:"events"`
	When    string      `yaml:"when"`
	Entity  string      `yaml:"entity"`
	Version FlowVersion `yaml:"version"`
	State   string      `yaml:"state"`
	Effects []Effect    `yaml:"effects"`
	// Owner is who repairs the events this flow dead-letters: the
	// exception queue names them until someone else takes it on.
	Owner string `yaml:"owner"`
	// Forward, instead of effects, sends every event as received to one
	// destination; OrderBy ("occurrence", with Entity) keeps an entity's
	// events in order (forward.go).
	Forward *Forward `yaml:"forward"`
	OrderBy string   `yaml:"order_by"`

	// Compiled holds the compiled expressions, filled by validation.
	Compiled *CompiledFlow `yaml:"-"`
}

// FlowVersion says how the business version is known.
type FlowVersion struct {
	Mode     string `yaml:"mode"`
	Revision string `yaml:"revision"`
	// Path and Query make the refetch request (mode refetch).
	Path     string   `yaml:"path"`
	Query    string   `yaml:"query"`
	Field    string   `yaml:"field"`
	Hash     []string `yaml:"hash"`
	TieBreak string   `yaml:"tie_break"`
}

// Effect is one business effect a flow may cause, once per episode key
// flow:entity:version:effect.
type Effect struct {
	Name         string        `yaml:"name"`
	When         string        `yaml:"when"`
	Destination  string        `yaml:"destination"`
	Request      EffectRequest `yaml:"request"`
	Operation    string        `yaml:"operation"`
	IdempotentBy string        `yaml:"idempotent_by"`
	// Type and Data publish a message when Destination is "endpoints":
	// the message's literal type, and the expression whose value is its
	// data (docs/publishing.md).
	Type string `yaml:"type"`
	Data string `yaml:"data"`

	// Deadline is the business deadline (docs/flows.md): a duration after
	// the event's occurrence time ("30m", "2h"), or an expression giving
	// a timestamp. OnDeadline is "" (keep trying once it has passed) or
	// "dead" (hand the effect to a person).
	Deadline   string `yaml:"deadline"`
	OnDeadline string `yaml:"on_deadline"`
	// Compensation is the call that undoes the effect, of the same shape
	// as Request, with original (the effect undone) among its variables.
	// CompensateWhen, evaluated when a newer version of the entity is
	// applied, makes the compensation of the entity's earlier effects of
	// this name that it holds for.
	Compensation   *EffectRequest `yaml:"compensation"`
	CompensateWhen string         `yaml:"compensate_when"`
}

// EffectRequest maps the event and state onto the destination call.
type EffectRequest struct {
	Method string `yaml:"method"`
	// Path is relative to the destination's base_url; payload values in
	// it belong in pathEscape().
	Path string `yaml:"path"`
	// Query is a map expression of query parameters, whose keys and
	// values the request builder escapes: never concatenate a query
	// string into Path.
	Query   string            `yaml:"query"`
	Headers map[string]string `yaml:"headers"`
	Body    string            `yaml:"body"`
}

// CompiledFlow is a flow's expressions, compiled at load.
type CompiledFlow struct {
	When, Entity, State                 *expr.Program
	Revision, Path, Query, Field, Break *expr.Program
	Hash                                []*expr.Program
	Effects                             []*CompiledEffect
	// OpaqueBody is set on a forward flow whose expressions never read
	// event: its events are forwarded even when their body is no JSON
	// (a form-posting sender's), since nothing needs it decoded.
	OpaqueBody bool
	// ReadsPrevious is set when an effect expression reads previous, one
	// reason to load the projection before applying an event (the other:
	// an effect for a destination that sends changes only).
	ReadsPrevious bool
}

// CompiledEffect is one effect's compiled expressions.
type CompiledEffect struct {
	When    *expr.Program
	Path    *expr.Program
	Query   *expr.Program
	Body    *expr.Program
	Headers map[string]*expr.Program

	// DeadlineAfter is a deadline given as a duration after the event's
	// occurrence time; Deadline one given as an expression. At most one
	// is set.
	DeadlineAfter time.Duration
	Deadline      *expr.Program
	// Compensation is the compensation request's compiled form (its When
	// is unused); CompensateWhen the rule. Nil when not configured.
	Compensation   *CompiledEffect
	CompensateWhen *expr.Program
	// Forward marks a forward flow's effect: its request is the event's
	// body as received, with its content type, not an expression's value.
	Forward bool
}

// Operations an effect may declare (IP06).
var (
	operations      = []string{"set", "create", "increment"}
	idempotentByAll = []string{"idempotency_key", "unique_event"}
)

// arrivalData are the meta fields that differ between deliveries of one
// event; identities built from them make every retry look new (IP02).
var arrivalData = []string{"meta.received_at", "meta.request_id", "meta.delivery_id", "meta.attempt", "meta.now"}

func (c *Config) setFlowDefaults() {
	if c.Causation.Header == "" {
		c.Causation.Header = defaultCausationHeader
	}
	if c.Causation.HopHeader == "" {
		c.Causation.HopHeader = defaultHopHeader
	}
	if c.Causation.MaxHops == 0 {
		c.Causation.MaxHops = defaultMaxHops
	}
	if c.Processing.Workers == 0 {
		c.Processing.Workers = DefaultWorkers
	}
	setDur(&c.Processing.Lease, 30*time.Second)
	setDur(&c.Processing.RetryDelay, 5*time.Second)
	setDur(&c.Processing.PollInterval, 200*time.Millisecond)
	for i := range c.Sources {
		if a := c.Sources[i].API; a != nil && a.Timeout == 0 {
			a.Timeout = Duration(10 * time.Second)
		}
	}
	for i := range c.Flows {
		f := &c.Flows[i]
		if f.State == "" && f.Forward == nil {
			if f.Version.Mode == ModeRefetch {
				f.State = "object"
			} else {
				f.State = "event"
			}
		}
		for j := range f.Effects {
			e := &f.Effects[j]
			if e.Operation == "" {
				e.Operation = "set"
			}
			if e.Request.Method == "" {
				e.Request.Method = "POST"
			}
			if e.Compensation != nil && e.Compensation.Method == "" {
				e.Compensation.Method = "POST"
			}
		}
	}
}

// validateFlows checks and compiles every flow. warn records load-time
// warnings that do not stop the server.
func (c *Config) validateFlows(add func(path, format string, args ...any), warn func(path, format string, args ...any)) {
	c.validateProcessing(add)
	sources := c.validateSourceAPIs(add, warn)
	names := map[string]int{}
	for i := range c.Flows {
		fc := &flowCheck{add: add, warn: warn, f: &c.Flows[i], i: i, p: fmt.Sprintf("$.flows[%d]", i)}
		fc.check(sources, names)
	}
}

// MaxLinger bounds processing.linger: every event routed by the router
// after a quiet spell waits that long, so it is a latency added on
// purpose, and a second is already far past what it gains
// (docs/postgres.md, "Routing's linger").
const MaxLinger = time.Second

// validateProcessing checks the processing and causation settings, which
// every flow shares.
func (c *Config) validateProcessing(add addFunc) {
	if c.Causation.MaxHops < 0 {
		add("$.causation.max_hops", "causation.max_hops must be positive")
	}
	if c.Processing.Workers < 0 || c.Processing.Workers > 256 {
		add("$.processing.workers", "processing.workers must be from 1 to 256")
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"lease", c.Processing.Lease}, {"retry_delay", c.Processing.RetryDelay}, {"poll_interval", c.Processing.PollInterval}} {
		if d.v < 0 {
			add("$.processing."+d.name, "processing.%s must be positive", d.name)
		}
	}
	if l := c.Processing.Linger; l < 0 || l.D() > MaxLinger {
		add("$.processing.linger", "processing.linger must be from 0 to %s", MaxLinger)
	}
	for _, h := range []struct{ field, name string }{{"header", c.Causation.Header}, {"hop_header", c.Causation.HopHeader}} {
		checkStaticHeader(add, "$.causation."+h.field, "causation."+h.field, h.name, "")
	}
}

// validateSourceAPIs checks each source's api block, which refetch flows
// call, and returns the sources by name for the flows to look up.
func (c *Config) validateSourceAPIs(add, warn addFunc) map[string]*Source {
	sources := map[string]*Source{}
	for i := range c.Sources {
		sources[c.Sources[i].Name] = &c.Sources[i]
		if a := c.Sources[i].API; a != nil {
			ap := fmt.Sprintf("$.sources[%d].api", i)
			checkBaseURL(add, ap+".base_url", fmt.Sprintf("source %q: api.base_url", c.Sources[i].Name), a.BaseURL,
				"put them in api.bearer_token or api.headers, which are sent in headers only")
			if u, err := url.Parse(a.BaseURL); err == nil && !a.AllowPrivateNetworks {
				warnPrivateHost(warn, ap+".base_url", fmt.Sprintf("source %q: api.base_url", c.Sources[i].Name), "api.allow_private_networks", u.Hostname())
			}
			checkStaticHeader(add, ap+".bearer_token", fmt.Sprintf("source %q: api.bearer_token", c.Sources[i].Name), "", a.BearerToken)
			for name, v := range a.Headers {
				checkStaticHeader(add, ap+".headers."+name, fmt.Sprintf("source %q: api.headers.%s", c.Sources[i].Name, name), name, v)
			}
		}
	}
	return sources
}

// flowCheck checks and compiles one flow; it carries the flow and its
// path so that each phase (name, source, version, effects) reports under
// the same prefix.
type flowCheck struct {
	add, warn addFunc
	f         *Flow
	i         int
	p         string
	cf        *CompiledFlow
}

// check runs every phase in the order the errors have always come in and
// stores the compiled flow.
func (fc *flowCheck) check(sources map[string]*Source, names map[string]int) {
	f, p, add := fc.f, fc.p, fc.add
	expandForward(add, f, p)
	fc.cf = &CompiledFlow{}
	cf := fc.cf
	fc.checkName(names)
	src := sources[f.Source]
	if f.Source == "" {
		add(p, "flow %q: source is required", f.Name)
	} else if src == nil {
		add(p+".source", "flow %q: no source named %q", f.Name, f.Source)
	}
	if len(f.Events) == 0 && f.Forward == nil {
		add(p, "flow %q: events is required: the event types it subscribes to (globs such as \"order.*\")", f.Name)
	}
	for k, g := range f.Events {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			add(fmt.Sprintf("%s.events[%d]", p, k), "flow %q: %q is not a valid glob", f.Name, g)
		}
	}
	cf.When = fc.compile("when", f.When, false)
	cf.Entity = fc.compile("entity", f.Entity, true)
	fc.identity("entity", cf.Entity)
	cf.State = fc.compile("state", f.State, true)
	fc.checkVersion(src)
	effNames := map[string]bool{}
	for j := range f.Effects {
		fc.checkEffect(j, effNames)
	}
	if f.Forward != nil {
		cf.OpaqueBody = true
		for _, prog := range []*expr.Program{cf.When, cf.Entity} {
			if prog != nil && prog.Reads(expr.VarEvent) {
				cf.OpaqueBody = false
			}
		}
	}
	f.Compiled = cf
}

// compile compiles one of the flow's expressions, reporting it missing
// when required or malformed.
func (fc *flowCheck) compile(field, src string, required bool) *expr.Program {
	if src == "" {
		if required {
			fc.add(fc.p, "flow %q: %s is required", fc.f.Name, field)
		}
		return nil
	}
	prog, err := expr.Compile(src)
	if err != nil {
		fc.add(fc.p+"."+field, "flow %q: %s: %v", fc.f.Name, field, err)
		return nil
	}
	return prog
}

// identity enforces IP02: the episode key is flow:entity:version:effect,
// so neither the entity nor the version may come from arrival data.
func (fc *flowCheck) identity(field string, prog *expr.Program) {
	if prog == nil {
		return
	}
	for _, a := range arrivalData {
		if prog.Reads(a) {
			fc.add(fc.p+"."+field, "flow %q: IP02: %s reads %s, which changes with every delivery, so each retry would look like a new effect; build identities from the entity and the business version", fc.f.Name, field, a)
		}
	}
}

// checkName checks the flow's name and records it in names, so that a
// second flow with the same name names the first.
func (fc *flowCheck) checkName(names map[string]int) {
	f, p, i := fc.f, fc.p, fc.i
	switch {
	case f.Name == "":
		fc.add(p, "flows[%d]: name is required", i)
	case !validSourceName(f.Name):
		fc.add(p+".name", "flow name %q: use lowercase letters, digits, '-' and '_'", f.Name)
	default:
		if j, dup := names[f.Name]; dup {
			fc.add(p+".name", "duplicate flow name %q (already used by flows[%d])", f.Name, j)
		} else {
			names[f.Name] = i
		}
	}
}

// checkVersion checks and compiles the flow's version block, whose fields
// differ by mode.
func (fc *flowCheck) checkVersion(src *Source) {
	f, add, cf := fc.f, fc.add, fc.cf
	v := f.Version
	vp := fc.p + ".version"
	switch v.Mode {
	case ModeRevision:
		cf.Revision = fc.compile("version.revision", v.Revision, true)
		fc.identity("version.revision", cf.Revision)
		for _, other := range []struct{ k, v string }{{"path", v.Path}, {"query", v.Query}, {"field", v.Field}, {"tie_break", v.TieBreak}} {
			if other.v != "" {
				add(vp+"."+other.k, "flow %q: version.%s does not apply to mode revision", f.Name, other.k)
			}
		}
	case ModeRefetch:
		fc.checkRefetch(src)
	case ModeOccurredAt:
		fc.checkOccurredAt(src)
	case "":
		add(vp, "flow %q: version.mode is required: revision, refetch or occurred_at", f.Name)
	default:
		add(vp+".mode", "flow %q: unknown version.mode %q (revision, refetch or occurred_at)", f.Name, v.Mode)
	}
}

// checkRefetch checks mode refetch: where to fetch the object, and which
// of its fields (or their hash) is the version.
func (fc *flowCheck) checkRefetch(src *Source) {
	f, add, cf := fc.f, fc.add, fc.cf
	v := f.Version
	vp := fc.p + ".version"
	cf.Path = fc.compile("version.path", v.Path, true)
	checkPathExpr(add, vp+".path", fmt.Sprintf("flow %q: version.path", f.Name), cf.Path)
	cf.Query = fc.compile("version.query", v.Query, false)
	checkQueryExpr(add, vp+".query", fmt.Sprintf("flow %q: version.query", f.Name), cf.Query)
	if (v.Field == "") == (len(v.Hash) == 0) {
		add(vp, "flow %q: mode refetch needs exactly one of version.field (a monotonic field of the object) or version.hash (fields whose hash is the version)", f.Name)
	}
	cf.Field = fc.compile("version.field", v.Field, false)
	fc.identity("version.field", cf.Field)
	for k, h := range v.Hash {
		prog, err := expr.Compile(h)
		if err != nil {
			add(fmt.Sprintf("%s.hash[%d]", vp, k), "flow %q: version.hash[%d]: %v", f.Name, k, err)
			continue
		}
		fc.identity(fmt.Sprintf("version.hash[%d]", k), prog)
		cf.Hash = append(cf.Hash, prog)
	}
	if src != nil && (src.API == nil || src.API.BaseURL == "") {
		add(fc.p+".source", "flow %q: mode refetch reads source %q's API: give that source an api.base_url", f.Name, f.Source)
	}
}

// checkOccurredAt checks mode occurred_at, which orders by the sender's
// timestamp and so needs a tie-break and a source that carries one.
func (fc *flowCheck) checkOccurredAt(src *Source) {
	f, p, add, warn, cf := fc.f, fc.p, fc.add, fc.warn, fc.cf
	v := f.Version
	vp := p + ".version"
	if v.Path != "" || v.Query != "" {
		add(vp, "flow %q: version.path and version.query apply to mode refetch only", f.Name)
	}
	cf.Break = fc.compile("version.tie_break", v.TieBreak, false)
	if v.TieBreak == "" {
		add(vp, "flow %q: mode occurred_at needs version.tie_break: events at the same instant must still have one order", f.Name)
	}
	fc.identity("version.tie_break", cf.Break)
	if f.Forward != nil && src != nil && !carriesOccurrence(src) {
		add(p+".order_by", "flow %q: order_by: occurrence needs each event's occurrence time, and source %q (kind %s) carries none: set the source's fields.occurred_at, or leave order_by out", f.Name, f.Source, src.Kind)
	}
	if k, ok := coarseTime(src); ok && f.Forward != nil {
		warn(p+".order_by", "flow %q: OR01: %s's %s is in seconds, so events in the same second are forwarded in event id order, not in the order they happened", f.Name, k.Title, k.Identity.OccurredAt)
	} else if ok {
		warn(vp+".mode", "flow %q: OR01: %s's %s is in seconds, so events in the same second are ordered only by the tie-break, not by what happened first; prefer mode refetch", f.Name, k.Title, k.Identity.OccurredAt)
	}
}

// effectCheck checks and compiles one effect of a flow, reporting under
// the effect's path.
type effectCheck struct {
	*flowCheck
	e  *Effect
	ep string
}

// compile compiles one of the effect's expressions, reporting it missing
// when required or malformed.
func (ec *effectCheck) compile(field, src string, required bool) *expr.Program {
	if src == "" {
		if required {
			ec.add(ec.ep, "flow %q: effect %q: %s is required", ec.f.Name, ec.e.Name, field)
		}
		return nil
	}
	prog, err := expr.Compile(src)
	if err != nil {
		ec.add(ec.ep+"."+field, "flow %q: effect %q: %s: %v", ec.f.Name, ec.e.Name, field, err)
		return nil
	}
	return prog
}

// checkEffect checks effects[j] and appends its compiled form to the
// flow's; effNames holds the names seen so far, for duplicates.
func (fc *flowCheck) checkEffect(j int, effNames map[string]bool) {
	f, add, cf := fc.f, fc.add, fc.cf
	e := &f.Effects[j]
	ep := fmt.Sprintf("%s.effects[%d]", fc.p, j)
	ec := &effectCheck{flowCheck: fc, e: e, ep: ep}
	ce := &CompiledEffect{Headers: map[string]*expr.Program{}, Forward: f.Forward != nil}
	ec.checkFields(j, effNames)
	ce.When = ec.compile("when", e.When, false)
	if e.Destination == publishDestination {
		// Publishing: the body is the message; no path, no query.
		if e.Request.Method == "" {
			e.Request.Method = "POST"
		}
		if e.Request.Path != "" || e.Request.Body != "" || e.Request.Query != "" {
			add(ep+".request", "flow %q: effect %q: an effect sent to %s takes type and data, not request.path, request.query or request.body", f.Name, e.Name, publishDestination)
		}
		e.Request.Path = `""`
		if e.Data != "" && ValidMessageType(e.Type) {
			e.Request.Body = publishBody(e.Type, e.Data)
		}
	}
	ce.Path = ec.compile("request.path", e.Request.Path, true)
	checkPathExpr(add, ep+".request.path", fmt.Sprintf("flow %q: effect %q: request.path", f.Name, e.Name), ce.Path)
	ce.Query = ec.compile("request.query", e.Request.Query, false)
	checkQueryExpr(add, ep+".request.query", fmt.Sprintf("flow %q: effect %q: request.query", f.Name, e.Name), ce.Query)
	ce.Body = ec.compile("request.body", e.Request.Body, false)
	for h, src := range e.Request.Headers {
		ce.Headers[h] = ec.compile("request.headers."+h, src, true)
		checkHeaderExpr(add, ep+".request.headers."+h, fmt.Sprintf("flow %q: effect %q: request.headers.%s", f.Name, e.Name, h), h, ce.Headers[h])
	}
	compileOutcomes(add, ec.compile, f, e, ep, ce)
	cf.Effects = append(cf.Effects, ce)
	for _, prog := range append([]*expr.Program{ce.When, ce.Path, ce.Query, ce.Body}, mapValues(ce.Headers)...) {
		if prog != nil && prog.Reads(expr.VarPrevious) {
			cf.ReadsPrevious = true
		}
	}
	if ce.CompensateWhen != nil {
		// The rule compares the new state with the one before.
		cf.ReadsPrevious = true
	}
}

// checkFields checks the effect's plain fields: name, destination, method,
// operation and how it is idempotent.
func (ec *effectCheck) checkFields(j int, effNames map[string]bool) {
	f, e, ep, add := ec.f, ec.e, ec.ep, ec.add
	switch {
	case e.Name == "":
		add(ep, "flow %q: effects[%d]: name is required", f.Name, j)
	case strings.ContainsAny(e.Name, ": ") || !validSourceName(e.Name):
		add(ep+".name", "flow %q: effect name %q: use lowercase letters, digits, '-' and '_'", f.Name, e.Name)
	case effNames[e.Name]:
		add(ep+".name", "flow %q: duplicate effect name %q", f.Name, e.Name)
	}
	effNames[e.Name] = true
	if e.Destination == "" {
		add(ep, "flow %q: effect %q: destination is required", f.Name, e.Name)
	}
	if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, e.Request.Method) {
		add(ep+".request.method", "flow %q: effect %q: method %q is not GET, POST, PUT, PATCH or DELETE", f.Name, e.Name, e.Request.Method)
	}
	if !slices.Contains(operations, e.Operation) {
		add(ep+".operation", "flow %q: effect %q: operation %q is not one of %s", f.Name, e.Name, e.Operation, strings.Join(operations, ", "))
	}
	if e.Operation == "increment" && e.IdempotentBy == "" {
		add(ep+".operation", "flow %q: effect %q: IP06: an increment is not idempotent (\"add 1\" twice adds 2); set a value instead, or say how it is made idempotent with idempotent_by: %s", f.Name, e.Name, strings.Join(idempotentByAll, " or "))
	}
	if e.IdempotentBy != "" && !slices.Contains(idempotentByAll, e.IdempotentBy) {
		add(ep+".idempotent_by", "flow %q: effect %q: idempotent_by %q is not one of %s", f.Name, e.Name, e.IdempotentBy, strings.Join(idempotentByAll, ", "))
	}
}

func mapValues(m map[string]*expr.Program) []*expr.Program {
	out := make([]*expr.Program, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// carriesOccurrence reports whether the source's events carry an
// occurrence time: the kind reads one, or the source names its field.
func carriesOccurrence(src *Source) bool {
	if src.Fields.OccurredAt != "" {
		return true
	}
	k, ok := senderkind.Builtin().Lookup(src.Kind)
	return !ok || k.Identity.OccurredAt != "" || k.Identity.Rules.OccurredAt != nil
}

// coarseTime returns the source's kind when the source orders its events
// by the kind's own occurrence time and that time counts whole seconds
// (senderkind.Identity.CoarseTime).
func coarseTime(src *Source) (senderkind.Kind, bool) {
	if src == nil || src.Fields.OccurredAt != "" {
		return senderkind.Kind{}, false
	}
	k, ok := senderkind.Builtin().Lookup(src.Kind)
	return k, ok && k.Identity.CoarseTime
}
