// Package config loads hookledger.yaml: strict YAML (unknown keys, wrong
// types and bad values are errors that name file:line), ${VAR} expansion from
// the environment, defaults and validation in one place.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// DefaultPath is where serve and migrate look when --config is not given.
const DefaultPath = "hookledger.yaml"

// Defaults applied by setDefaults.
const (
	defaultListen            = "127.0.0.1:8080"
	defaultStore             = "sqlite:./data/hookledger.db"
	DefaultMaxBodyBytes      = 1 << 20
	defaultReadHeaderTimeout = 5 * time.Second
	defaultReadTimeout       = 10 * time.Second
	defaultWriteTimeout      = 15 * time.Second
	defaultIdleTimeout       = 60 * time.Second
	defaultShutdownTimeout   = 20 * time.Second
	defaultRetryAfter        = 5 * time.Second
	defaultCommitTimeout     = 5 * time.Second
)

// kindNames are the sender kinds a source may name, in the registry's order.
var kindNames = senderkind.Builtin().Names()

// Config is the whole file.
type Config struct {
	Listen        string        `yaml:"listen"`
	Store         string        `yaml:"store"`
	Admin         Admin         `yaml:"admin"`
	Metrics       Metrics       `yaml:"metrics"`
	Receive       Receive       `yaml:"receive"`
	Sources       []Source      `yaml:"sources"`
	Causation     Causation     `yaml:"causation"`
	Processing    Processing    `yaml:"processing"`
	Flows         []Flow        `yaml:"flows"`
	Destinations  []Destination `yaml:"destinations"`
	Delivery      Delivery      `yaml:"delivery"`
	Notifications Notifications `yaml:"notifications"`
	Signals       Signals       `yaml:"signals"`
	Retention     Retention     `yaml:"retention"`
	// Publish and Endpoints configure publishing webhooks to endpoints
	// (docs/publishing.md).
	Publish   Publish          `yaml:"publish"`
	Endpoints []EndpointConfig `yaml:"endpoints"`
	// Tracing configures OpenTelemetry traces (docs/tracing.md).
	Tracing Tracing `yaml:"tracing"`

	// Path is the file the config was read from (for messages).
	Path string `yaml:"-"`
	// Warnings are load-time findings that do not stop the server (shown at
	// start and by lint --config).
	Warnings Errors `yaml:"-"`
	// DefaultedSecrets are the secret-bearing fields whose value came from
	// a ${VAR:-default} default written in the file, such as the
	// quick-start's demo secrets: anyone who can read the file knows them,
	// so serve warns about each at start.
	DefaultedSecrets []SecretRef `yaml:"-"`
	// Operator is set by LoadOperator; UnresolvedSecrets are then the
	// secret-bearing fields left empty because their variable is not set.
	Operator          bool        `yaml:"-"`
	UnresolvedSecrets []SecretRef `yaml:"-"`
}

// Admin configures the authenticated admin API.
type Admin struct {
	// Token is the bearer token for /api/v1; an empty token disables the
	// admin API rather than leaving it open.
	Token string `yaml:"token"`
}

// Receive bounds what one inbound request may cost the server.
type Receive struct {
	MaxBodyBytes      int64    `yaml:"max_body_bytes"`
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	ReadTimeout       Duration `yaml:"read_timeout"`
	WriteTimeout      Duration `yaml:"write_timeout"`
	IdleTimeout       Duration `yaml:"idle_timeout"`
	ShutdownTimeout   Duration `yaml:"shutdown_timeout"`
	// RetryAfter is what a 503 tells the sender when the store cannot commit.
	RetryAfter Duration `yaml:"retry_after"`
	// CommitTimeout bounds how long a request waits for its durable commit
	// before it is answered 503 with Retry-After. It must stay below
	// WriteTimeout: an answer decided after the connection's write deadline
	// is never delivered, and the sender sees a dropped connection instead
	// of a reason to retry.
	CommitTimeout Duration `yaml:"commit_timeout"`
	// TrustedProxies are the addresses (IPs or CIDR prefixes) whose
	// X-Forwarded-Proto, X-Forwarded-Host and Forwarded headers are believed
	// when the URL a sender signed is rebuilt for a source without
	// public_url. From any other peer those headers are ignored.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// DefaultWorkers is the default number of processing workers and of
// delivery workers. A worker spends most of its time waiting for a durable
// commit that it shares with every other writer, so it costs a goroutine,
// not a processor; with 16 the end-to-end benchmark fell behind a send rate
// of 968/s (end-to-end p99 3.4 s) where 64 kept up with 936/s (p99 124 ms)
// (docs/benchmarks-history.md, "Run E").
const DefaultWorkers = 64

// Processing tunes the ordered processor.
type Processing struct {
	// Workers bounds the entities processed in parallel by this process.
	Workers int `yaml:"workers"`
	// Lease is how long a worker holds an entity; a crashed worker's
	// entities are taken over after it.
	Lease Duration `yaml:"lease"`
	// RetryDelay defers an entity whose refetch failed transiently.
	RetryDelay Duration `yaml:"retry_delay"`
	// PollInterval is how often an idle worker looks for work.
	PollInterval Duration `yaml:"poll_interval"`
	// Linger is how long routing waits, once woken with no backlog,
	// before it takes its page: lone events arriving meanwhile share one
	// routing transaction (0, the default: none).
	Linger Duration `yaml:"linger"`
}

// Delivery tunes the effect delivery worker.
type Delivery struct {
	// Workers bounds concurrent destination calls of this process.
	Workers int `yaml:"workers"`
	// Lease must exceed the longest destination timeout: an effect still
	// submitting after it is presumed abandoned and reconciled.
	Lease        Duration `yaml:"lease"`
	PollInterval Duration `yaml:"poll_interval"`
}

// Source is one sender served at POST /hooks/{name}.
type Source struct {
	Name    string   `yaml:"name"`
	Kind    string   `yaml:"kind"`
	Version string   `yaml:"version"`
	Secrets []string `yaml:"secrets"`
	// Tolerance bounds the age (and future skew) of signed timestamps;
	// nil means the scheme's default.
	Tolerance *Duration `yaml:"tolerance"`
	// Account is the tenant the payload must name (WH04); empty skips the check.
	Account string `yaml:"account"`
	// PublicURL is the URL the sender calls, for schemes that sign it
	// (HubSpot v2/v3) when a proxy changes the Host or path.
	PublicURL string     `yaml:"public_url"`
	HMAC      *HMAC      `yaml:"hmac"`
	Fields    FieldPaths `yaml:"fields"`
	// ExtraParams are form parameters a twilio source accepts beyond
	// those Twilio documents, which are all it accepts otherwise
	// (docs/signatures.md).
	ExtraParams []string `yaml:"extra_params"`
	// API is the source's own API, read by refetch flows.
	API *SourceAPI `yaml:"api"`
	// Retention is how long the source's events and what hangs off them
	// are kept (default 30 days; docs/retention.md).
	Retention RetentionPeriod `yaml:"retention"`
}

// HMAC configures the generic HMAC scheme (kind: hmac).
type HMAC struct {
	Header          string `yaml:"header"`
	Algorithm       string `yaml:"algorithm"`
	Encoding        string `yaml:"encoding"`
	Prefix          string `yaml:"prefix"`
	TimestampHeader string `yaml:"timestamp_header"`
	TimestampUnit   string `yaml:"timestamp_unit"`
	Template        string `yaml:"template"`
}

// FieldPaths overrides where identities are read from the payload.
type FieldPaths struct {
	EventID    string `yaml:"event_id"`
	Type       string `yaml:"type"`
	OccurredAt string `yaml:"occurred_at"`
	Entity     string `yaml:"entity"`
	Account    string `yaml:"account"`
}

// ToleranceOrZero returns the configured tolerance, or 0 for the scheme default.
func (s *Source) ToleranceOrZero() time.Duration {
	if s.Tolerance == nil {
		return 0
	}
	return s.Tolerance.D()
}

// SchemeOptions maps the source onto the verifier's options through its
// sender kind (a kind may pin options, as github pins the hmac header). An
// unknown kind is passed on as it is, for signature.New to refuse.
func (s *Source) SchemeOptions() signature.Options {
	return s.schemeOptions(senderkind.Builtin())
}

func (s *Source) schemeOptions(kinds *senderkind.Registry) signature.Options {
	if k, ok := kinds.Lookup(s.Kind); ok {
		return k.Options(s.KindSource(), s.Secrets)
	}
	o := signature.Options{Kind: s.Kind, Version: s.Version, Secrets: s.Secrets, Tolerance: s.ToleranceOrZero()}
	o.HMAC = s.hmacOptions()
	return o
}

func (s *Source) hmacOptions() *signature.HMACOptions {
	if s.HMAC == nil {
		return nil
	}
	return &signature.HMACOptions{
		Header: s.HMAC.Header, Algorithm: s.HMAC.Algorithm, Encoding: s.HMAC.Encoding,
		Prefix: s.HMAC.Prefix, TimestampHeader: s.HMAC.TimestampHeader,
		TimestampUnit: s.HMAC.TimestampUnit, Template: s.HMAC.Template,
	}
}

// KindSource is what the source's sender kind sees of it.
func (s *Source) KindSource() senderkind.Source {
	ks := senderkind.Source{
		Name: s.Name, Kind: s.Kind, Version: s.Version, PublicURL: s.PublicURL,
		HMAC:        s.hmacOptions(),
		Fields:      senderkind.Fields(s.Fields),
		ExtraParams: s.ExtraParams,
	}
	if s.Tolerance != nil {
		d := s.Tolerance.D()
		ks.Tolerance = &d
	}
	return ks
}

// Duration is a time.Duration written as a Go duration string ("5m", "1h30m").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a duration string and reports a bad one with its
// position, which the YAML library does not do for time.Duration.
func (d *Duration) UnmarshalYAML(node ast.Node) error {
	s, ok := node.(*ast.StringNode)
	if !ok {
		if _, isNull := node.(*ast.NullNode); isNull {
			*d = 0
			return nil
		}
		return posErrorf(node, "expected a duration such as 5s or 2m, got %s", node.Type())
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil {
		return posErrorf(node, "invalid duration %q: expected a number with a unit such as 500ms, 5s, 2m or 1h", s.Value)
	}
	*d = Duration(v)
	return nil
}

// Error is a config problem at a known place in the file.
type Error struct {
	File string
	Line int // 0 when the problem has no single line
	Col  int
	Msg  string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Col > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	default:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
}

// Errors is every problem found in one file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// posError is an error raised while decoding one node, before the file name
// is known.
type posError struct {
	line, col int
	msg       string
}

func (e *posError) Error() string { return e.msg }

func posErrorf(node ast.Node, format string, args ...any) error {
	e := &posError{msg: fmt.Sprintf(format, args...)}
	if tk := node.GetToken(); tk != nil && tk.Position != nil {
		e.line, e.col = tk.Position.Line, tk.Position.Column
	}
	return e
}

// Load reads, expands, decodes, defaults and validates the file at path.
// lookup resolves ${VAR} (os.LookupEnv in production).
func Load(path string, lookup func(string) (string, bool)) (*Config, error) {
	return load(path, lookup, false)
}

// LoadOperator loads the file for the operator verbs (effects, replay,
// lint --config, tail, ...), which read the store or talk to a running
// server but never verify a signature nor call a destination or a source's
// API. They need no secrets: a missing ${VAR} in a secret-bearing field
// (sources[].secrets, admin.token, destination auth, source API
// credentials, notifications.webhook_url) leaves the field empty and is
// listed in UnresolvedSecrets, and the sources' secret formats are not
// checked. Every other problem is an error with file:line as with Load.
func LoadOperator(path string, lookup func(string) (string, bool)) (*Config, error) {
	return load(path, lookup, true)
}

func load(path string, lookup func(string) (string, bool), operator bool) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: fmt.Sprintf("cannot read config: %v", errors.Unwrap(err))}
	}
	cfg, err := parse(path, data, lookup, operator)
	if err != nil {
		return nil, err
	}
	// A relative sqlite: path is relative to the file's directory, not to
	// wherever the command runs: a cron job started from another
	// directory must read the server's database, not be sent to create
	// an empty one.
	cfg.Store = storeopen.Resolve(cfg.Store, filepath.Dir(path))
	return cfg, nil
}

// Parse is Load on bytes already read; path is used in messages only.
func Parse(path string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	return parse(path, data, lookup, false)
}

// parseOperator is LoadOperator on bytes already read.
func parseOperator(path string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	return parse(path, data, lookup, true)
}

func parse(path string, data []byte, lookup func(string) (string, bool), operator bool) (*Config, error) {
	protected, refs := protectEnvRefs(data)
	file, err := parser.ParseBytes(protected, 0)
	if err != nil {
		return nil, yamlError(path, err)
	}
	secrets, errs := expandEnv(path, file, refs, lookup, operator)
	if len(errs) > 0 {
		return nil, errs
	}
	cfg := &Config{}
	if len(file.Docs) > 1 {
		return nil, &Error{File: path, Msg: "expected one YAML document, found several"}
	}
	if len(file.Docs) == 1 && file.Docs[0].Body != nil {
		if err := yaml.NodeToValue(file.Docs[0].Body, cfg, yaml.Strict()); err != nil {
			e := yamlError(path, err)
			if hint := keySuggestion(file.Docs[0].Body, err); hint != "" {
				if ce, ok := e.(*Error); ok {
					ce.Msg += ": " + hint
				}
			}
			return nil, e
		}
	}
	cfg.Path = path
	cfg.Operator = operator
	cfg.DefaultedSecrets = secrets.defaulted
	for _, u := range secrets.unresolved {
		cfg.UnresolvedSecrets = append(cfg.UnresolvedSecrets, u.SecretRef)
	}
	cfg.setDefaults()
	var errs2, warns []fieldError
	if operator {
		errs2, warns = cfg.validateOperator(secrets.unresolved)
	} else {
		errs2, warns = cfg.validate()
	}
	if len(errs2) > 0 {
		return nil, locate(path, file, errs2)
	}
	if len(warns) > 0 {
		cfg.Warnings = locate(path, file, warns).(Errors)
	}
	return cfg, nil
}

// validateOperator is validate without the checks of secret values. The
// sources' secrets, and destination credentials that an unset variable
// left empty, are swapped for placeholders of a valid format while the
// rules run, so every other rule (the scheme's version, tolerance and hmac
// options, "auth needs exactly one of bearer, basic or header") is still
// checked; a problem with an unresolved field itself is dropped.
func (c *Config) validateOperator(unresolved []unresolvedRef) (errs, warns []fieldError) {
	var restore []func()
	defer func() {
		for _, r := range restore {
			r()
		}
	}()
	kinds := senderkind.Builtin()
	for i := range c.Sources {
		s := &c.Sources[i]
		if len(s.Secrets) == 0 {
			continue
		}
		saved := s.Secrets
		restore = append(restore, func() { s.Secrets = saved })
		s.Secrets = make([]string, len(saved))
		for k := range s.Secrets {
			s.Secrets[k] = placeholderSecret(kinds, s.Kind)
		}
	}
	skip := map[string]bool{}
	for _, u := range unresolved {
		skip[u.yamlPath] = true
		if f := c.authField(u.yamlPath); f != nil {
			restore = append(restore, func() { *f = "" })
			*f = placeholderSecret(kinds, "")
		}
	}
	all, warns := c.validate()
	for _, e := range all {
		if !skip[e.path] {
			errs = append(errs, e)
		}
	}
	return errs, warns
}

var authPath = regexp.MustCompile(`^\$\.destinations\[(\d+)\]\.auth\.(bearer|basic\.user|basic\.password|header\.value)$`)

// authField returns the destination credential a YAML path names, or nil.
func (c *Config) authField(yamlPath string) *string {
	m := authPath.FindStringSubmatch(yamlPath)
	if m == nil {
		return nil
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(c.Destinations) || c.Destinations[i].Auth == nil {
		return nil
	}
	a := c.Destinations[i].Auth
	switch {
	case m[2] == "bearer":
		return &a.Bearer
	case m[2] == "basic.user" && a.Basic != nil:
		return &a.Basic.User
	case m[2] == "basic.password" && a.Basic != nil:
		return &a.Basic.Password
	case m[2] == "header.value" && a.Header != nil:
		return &a.Header.Value
	}
	return nil
}

// placeholderSecret is a secret of a format the kind accepts. It only
// stands in while an operator load validates and is never kept.
func placeholderSecret(kinds *senderkind.Registry, kind string) string {
	if k, ok := kinds.Lookup(kind); ok && k.Scheme.Placeholder != "" {
		return k.Scheme.Placeholder
	}
	return "operator-load-placeholder"
}

// yamlError turns a decoding error into an Error with the position the YAML
// library or our own unmarshalers recorded.
func yamlError(path string, err error) error {
	var pe *posError
	if errors.As(err, &pe) {
		return &Error{File: path, Line: pe.line, Col: pe.col, Msg: pe.msg}
	}
	var ye yaml.Error
	if errors.As(err, &ye) {
		e := &Error{File: path, Msg: ye.GetMessage()}
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Col = tk.Position.Line, tk.Position.Column
		}
		return e
	}
	return &Error{File: path, Msg: err.Error()}
}
