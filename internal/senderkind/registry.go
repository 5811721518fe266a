package senderkind

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Kind is everything hookledger knows about one kind of sender.
type Kind struct {
	// Name is what the config's kind: says.
	Name string
	// Title names the sender for people.
	Title string
	// Scheme is how the sender's requests are verified.
	Scheme Scheme
	// Identity is where the events' identities are read from.
	Identity Identity
	// Keep lists the request headers stored beside the body as evidence:
	// identifiers and timestamps, never signatures or credentials.
	// Content-Type and User-Agent are kept for every kind.
	Keep []string
	// KeepFor adds headers that depend on the source's options (the hmac
	// kind's configured timestamp header); nil adds none.
	KeepFor func(Source) []string
	// Tolerance is the default accepted age of a signed timestamp; 0 when
	// the sender signs none.
	Tolerance time.Duration
	// Check returns the kind's own config findings for a source, beyond
	// the checks every source gets and those the scheme makes itself. nil
	// checks nothing.
	Check func(Source) []Problem
	// Vendor names the kind's delivery contract in package vendors's
	// catalogue; Contract declares it here instead for a sender the
	// catalogue does not hold. At most one of them is set; neither for a
	// generic kind whose sender is not known.
	Vendor   string
	Contract *vendors.Contract
	// Sign says what `hookledger sign` can produce for the kind.
	Sign Sign
	// Sample is the built-in sample `hookledger send` uses by default, a
	// file under samples/<kind>/ (SampleNames lists them); empty when the
	// kind has none.
	Sample string
	// SampleNote is shown beside the kind's samples by `send
	// --list-samples`.
	SampleNote string
	// Fill gives a sample fresh identities and times, and the source's
	// account, where the kind carries them (FillSample).
	Fill func(*SampleDoc)
	// Handshake, when set, recognises a verified request that is part of
	// the sender's endpoint set-up rather than an event (Slack's
	// url_verification): the receiver answers it with the Reply and stores
	// nothing. It runs only after the signature verified.
	Handshake func(body []byte) (Reply, bool)
}

// Reply is the answer to a handshake request.
type Reply struct {
	ContentType string
	Body        []byte
	// What names the handshake for the log.
	What string
}

// Scheme is a kind's signature scheme.
type Scheme struct {
	// Name is the verify scheme (signature.KindStripe ...).
	Name string
	// Versions lists the scheme versions a source may pin, the default
	// first; nil when the scheme has no versions.
	Versions []string
	// HMAC says the source configures the generic HMAC scheme itself with
	// an hmac: block, which is then required. Otherwise the block is
	// refused.
	HMAC bool
	// Pin fixes the generic HMAC scheme's options for a kind built on it
	// (the header and prefix a sender always uses).
	Pin *signature.HMACOptions
	// SignsURL reports whether the source's scheme signs the URL the
	// sender called, so the config can warn when public_url is not set.
	// nil means never.
	SignsURL func(Source) bool
	// Placeholder is a secret of a format the scheme accepts. It stands in
	// for unset secrets while the operator verbs validate the config and
	// is never used to verify or sign.
	Placeholder string
}

// Identity says where an event's identities are read from a verified body.
// Paths use envelope's syntax: dotted keys, an all-digit segment indexes an
// array, "$." resolves from the document root in a batch, "header:Name"
// reads a request header. A source's fields: override any path.
type Identity struct {
	EventID, Type, OccurredAt, Entity, Account string
	// TypeRequired refuses an event without a type (HTTP 400).
	TypeRequired bool
	// Unit is the unit of a numeric occurrence time.
	Unit time.Duration
	// CoarseTime says OccurredAt counts whole seconds, so events of one
	// second have no order of their own: a flow that orders by it is
	// warned (OR01).
	CoarseTime bool
	// EventIDHeaders are request headers, tried in order, that name the
	// event when EventID is empty; the first one present is used.
	EventIDHeaders []string
	// Rules are the kind's identity rules that paths cannot express,
	// applied by envelope.
	Rules Rules
	// Batch is how a body carries several events.
	Batch Batch
	// Form says the sender posts application/x-www-form-urlencoded
	// bodies (Twilio): the body is read as an object of its parameters,
	// each a string (the first value of a repeated name), unless it is a
	// JSON object, which is read as JSON.
	Form bool
	// Params, for a Form kind, is the closed set of form parameters the
	// sender documents, with the shape of each value; nil takes any. A
	// source adds names with extra_params (IdentityFor).
	Params Params
}

// Batch says how a body carries events.
type Batch struct {
	// Array: the body is a JSON array of events.
	Array bool
	// Key: the body is an object whose Key holds the array of events.
	Key string
	// Max bounds the events in one body; 0 means no bound.
	Max int
}

// Sign is what `hookledger sign` can produce for a kind.
type Sign struct {
	// EventIDHeader says the scheme carries the event id in a header, so
	// sign's --event-id sets it.
	EventIDHeader bool
	// IDHeader, when set, is the header the sender names the event in
	// outside the signed content (GitHub's X-GitHub-Delivery): sign writes
	// the event id into it beside the signature.
	IDHeader string
	// HeaderSets are the header names the sender may use, the default
	// first; sign's --headers picks one. Empty when the kind has one
	// fixed set.
	HeaderSets []signature.HeaderSet
	// URL, when set, turns the URL the request is posted to into the one
	// the sender would call for this body (Twilio adds bodySHA256 to the
	// query for a JSON body); sign signs that URL and reports it.
	URL func(url string, body []byte) string
	// NeedsURL says the scheme signs the URL, so sign needs public_url
	// (or --url) rather than the listen address.
	NeedsURL bool
}

// HeaderSet returns the named header set, or the default for "".
func (s Sign) HeaderSet(name string) (signature.HeaderSet, bool) {
	if len(s.HeaderSets) == 0 {
		return signature.HeaderSet{}, false
	}
	if name == "" {
		return s.HeaderSets[0], true
	}
	for _, hs := range s.HeaderSets {
		if hs.Name == name {
			return hs, true
		}
	}
	return signature.HeaderSet{}, false
}

// Source is what a kind sees of one configured source.
type Source struct {
	Name    string
	Kind    string
	Version string
	// Tolerance is nil when the config does not set it.
	Tolerance *time.Duration
	PublicURL string
	HMAC      *signature.HMACOptions
	// Fields are the source's overrides of the identity paths.
	Fields Fields
	// ExtraParams are form parameters the source accepts beyond the
	// kind's documented Params (extra_params).
	ExtraParams []string
}

// Fields override a kind's identity paths; empty keeps the kind's path.
type Fields struct {
	EventID, Type, OccurredAt, Entity, Account string
}

// Problem is one config finding of a kind's Check. Field is relative to
// the source ("tolerance", "hmac.header"); empty means the source itself.
// Msg is written to follow "source NAME: ".
type Problem struct {
	Field   string
	Msg     string
	Warning bool
}

// Options maps a source onto its scheme's options, with the given secrets.
func (k Kind) Options(s Source, secrets []string) signature.Options {
	o := signature.Options{Kind: k.Scheme.Name, Version: s.Version, Secrets: secrets}
	if s.Tolerance != nil {
		o.Tolerance = *s.Tolerance
	}
	switch {
	case k.Scheme.Pin != nil:
		pin := *k.Scheme.Pin
		o.HMAC = &pin
	case k.Scheme.HMAC && s.HMAC != nil:
		// Only a kind whose source configures the generic scheme takes
		// an hmac: block; the config refuses one anywhere else.
		h := *s.HMAC
		o.HMAC = &h
	}
	return o
}

// NewScheme builds the source's verifier.
func (k Kind) NewScheme(s Source, secrets []string) (signature.Scheme, error) {
	sc, err := signature.New(k.Options(s, secrets))
	if err != nil {
		return nil, fmt.Errorf("kind %s: %w", k.Name, err)
	}
	return sc, nil
}

// IdentityFor is the kind's identity for one source: a kind with a
// documented parameter set also accepts the source's extra_params.
func (k Kind) IdentityFor(s Source) Identity {
	id := k.Identity
	if id.Params != nil && len(s.ExtraParams) > 0 {
		id.Params = id.Params.With(s.ExtraParams)
	}
	return id
}

// KeptHeaders lists the headers a source of this kind keeps as evidence.
func (k Kind) KeptHeaders(s Source) []string {
	keep := append([]string{"Content-Type", "User-Agent"}, k.Keep...)
	if k.KeepFor != nil {
		keep = append(keep, k.KeepFor(s)...)
	}
	return keep
}

// SignsURL reports whether the source's scheme signs the URL.
func (k Kind) SignsURL(s Source) bool {
	return k.Scheme.SignsURL != nil && k.Scheme.SignsURL(s)
}

// Problems runs the kind's own checks.
func (k Kind) Problems(s Source) []Problem {
	if k.Check == nil {
		return nil
	}
	return k.Check(s)
}

// Registry is an immutable set of kinds, in a fixed order.
type Registry struct {
	kinds  []Kind
	byName map[string]int
	cat    vendors.Index
}

// New checks kinds and returns them as a registry: names unique and
// non-empty, a scheme named, a vendor name that the catalogue holds.
func New(kinds ...Kind) (*Registry, error) {
	r := &Registry{byName: map[string]int{}, cat: vendors.NewIndex()}
	var errs []error
	for _, k := range kinds {
		switch {
		case k.Name == "":
			errs = append(errs, errors.New("a kind has no name"))
			continue
		case k.Scheme.Name == "":
			errs = append(errs, fmt.Errorf("kind %s: no scheme", k.Name))
		case k.Vendor != "" && k.Contract != nil:
			errs = append(errs, fmt.Errorf("kind %s: both a vendor name and a contract", k.Name))
		}
		if _, dup := r.byName[k.Name]; dup {
			errs = append(errs, fmt.Errorf("kind %s: defined twice", k.Name))
			continue
		}
		if k.Vendor != "" {
			if _, ok := r.cat.Lookup(k.Vendor); !ok {
				errs = append(errs, fmt.Errorf("kind %s: vendor %q is not in the catalogue", k.Name, k.Vendor))
			}
		}
		r.byName[k.Name] = len(r.kinds)
		r.kinds = append(r.kinds, k)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sender kinds: %w", err)
	}
	return r, nil
}

// Builtin returns the registry of the kinds hookledger ships, built afresh.
func Builtin() *Registry {
	r, err := New(
		stripe(),
		hubspot(),
		klaviyo(),
		standardWebhooks(),
		pipedrive(),
		hmacKind(),
		github(),
		shopify(),
		slack(),
		twilio(),
		paddle(),
		square(),
		mailgun(),
	)
	if err != nil {
		// The built-in kinds are constants; a test builds them, so this
		// is a programming error caught before release.
		panic(err)
	}
	return r
}

// Lookup returns the kind with the given name.
func (r *Registry) Lookup(name string) (Kind, bool) {
	i, ok := r.byName[name]
	if !ok {
		return Kind{}, false
	}
	return r.kinds[i], true
}

// Names returns the kind names in registry order, in a fresh slice.
func (r *Registry) Names() []string {
	out := make([]string, len(r.kinds))
	for i, k := range r.kinds {
		out[i] = k.Name
	}
	return out
}

// Kinds returns the kinds in registry order, in a fresh slice.
func (r *Registry) Kinds() []Kind { return slices.Clone(r.kinds) }

// Contract returns the delivery contract of a kind: the one it declares,
// or the catalogue entry it names.
func (r *Registry) Contract(name string) (vendors.Contract, bool) {
	k, ok := r.Lookup(name)
	switch {
	case !ok:
		return vendors.Contract{}, false
	case k.Contract != nil:
		return *k.Contract, true
	case k.Vendor != "":
		return r.cat.Lookup(k.Vendor)
	}
	return vendors.Contract{}, false
}

// Catalogue is package vendors's catalogue plus the contracts the kinds
// declare themselves, sorted by name, in a fresh slice.
func (r *Registry) Catalogue() []vendors.Contract {
	cat := vendors.Catalogue()
	for _, k := range r.kinds {
		if k.Contract != nil {
			cat = append(cat, *k.Contract)
		}
	}
	sort.Slice(cat, func(i, j int) bool { return cat[i].Name < cat[j].Name })
	return cat
}

// VendorNames returns the names in Catalogue, sorted.
func (r *Registry) VendorNames() []string {
	cat := r.Catalogue()
	names := make([]string, len(cat))
	for i, c := range cat {
		names[i] = c.Name
	}
	return names
}

// Index is Catalogue as a lookup by name or alias.
func (r *Registry) Index() vendors.Index {
	ix := vendors.NewIndex()
	for _, k := range r.kinds {
		if c := k.Contract; c != nil {
			ix[vendors.Normalize(c.Name)] = *c
			for _, a := range c.Aliases {
				ix[vendors.Normalize(a)] = *c
			}
		}
	}
	return ix
}
