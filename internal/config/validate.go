package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// fieldError is a validation problem at a YAML path such as
// "$.sources[1].tolerance"; locate turns the path into a line.
type fieldError struct {
	path string
	msg  string
}

func (c *Config) setDefaults() {
	defer c.setRetentionDefaults()
	defer c.setMetricsDefaults()
	defer c.setSignalDefaults()
	defer c.setDestinationDefaults()
	defer c.setPublishDefaults()
	defer c.setFlowDefaults()
	if c.Listen == "" {
		c.Listen = defaultListen
	}
	if c.Store == "" {
		c.Store = defaultStore
	}
	r := &c.Receive
	if r.MaxBodyBytes == 0 {
		r.MaxBodyBytes = DefaultMaxBodyBytes
	}
	setDur(&r.ReadHeaderTimeout, defaultReadHeaderTimeout)
	setDur(&r.ReadTimeout, defaultReadTimeout)
	setDur(&r.WriteTimeout, defaultWriteTimeout)
	setDur(&r.IdleTimeout, defaultIdleTimeout)
	setDur(&r.ShutdownTimeout, defaultShutdownTimeout)
	setDur(&r.RetryAfter, defaultRetryAfter)
	// A commit wait that fits inside the write deadline whatever the user
	// chose for write_timeout.
	setDur(&r.CommitTimeout, min(defaultCommitTimeout, r.WriteTimeout.D()/2))
	kinds := senderkind.Builtin()
	for i := range c.Sources {
		s := &c.Sources[i]
		// A kind with versions pins its first (hubspot: v3) when none is
		// written.
		if k, ok := kinds.Lookup(s.Kind); ok && len(k.Scheme.Versions) > 0 && s.Version == "" {
			s.Version = k.Scheme.Versions[0]
		}
		if s.HMAC != nil {
			if s.HMAC.Algorithm == "" {
				s.HMAC.Algorithm = "sha256"
			}
			if s.HMAC.Encoding == "" {
				s.HMAC.Encoding = "hex"
			}
		}
	}
}

func setDur(d *Duration, def time.Duration) {
	if *d == 0 {
		*d = Duration(def)
	}
}

// validate checks every rule and returns all problems, not just the first.
func (c *Config) validate() (errs, warns []fieldError) {
	add := func(path, format string, args ...any) {
		errs = append(errs, fieldError{path: path, msg: fmt.Sprintf(format, args...)})
	}
	warn := func(path, format string, args ...any) {
		warns = append(warns, fieldError{path: path, msg: "warning: " + fmt.Sprintf(format, args...)})
	}
	c.validateServer(add, warn)
	seen := c.validateSources(add, warn)
	for i, name := range c.Causation.TrustedSources {
		if _, ok := seen[name]; !ok {
			add(fmt.Sprintf("$.causation.trusted_sources[%d]", i), "causation.trusted_sources[%d]: no source named %q is configured", i, name)
		}
	}
	c.validateFlows(add, warn)
	c.validateDestinations(add, warn)
	c.validatePublish(add, warn)
	c.validateSignals(add)
	c.validateRetention(add)
	return errs, warns
}

// validateServer checks what the HTTP server and the store are opened
// with: the listen address, the store URL, the receive limits and
// timeouts, metrics and the trusted proxies.
func (c *Config) validateServer(add, warn addFunc) {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("$.listen", "listen: %q is not host:port (for example 127.0.0.1:8080)", c.Listen)
	}
	// The drivers' own table says which URLs they take (storeopen).
	if err := storeopen.Check(c.Store); err != nil {
		add("$.store", "store: %v", err)
	}
	if c.Receive.MaxBodyBytes < 0 {
		add("$.receive.max_body_bytes", "receive.max_body_bytes must be positive")
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{
		{"read_header_timeout", c.Receive.ReadHeaderTimeout},
		{"read_timeout", c.Receive.ReadTimeout},
		{"write_timeout", c.Receive.WriteTimeout},
		{"idle_timeout", c.Receive.IdleTimeout},
		{"shutdown_timeout", c.Receive.ShutdownTimeout},
		{"retry_after", c.Receive.RetryAfter},
		{"commit_timeout", c.Receive.CommitTimeout},
	} {
		if d.v < 0 {
			add("$.receive."+d.name, "receive.%s must be positive", d.name)
		}
	}
	if c.Receive.CommitTimeout >= c.Receive.WriteTimeout {
		add("$.receive.commit_timeout", "receive.commit_timeout (%s) must be below receive.write_timeout (%s): a 503 decided after the write deadline never reaches the sender, who sees a dropped connection instead", c.Receive.CommitTimeout.D(), c.Receive.WriteTimeout.D())
	}
	c.validateMetrics(add, warn)
	c.validateTracing(add)
	for i, tp := range c.Receive.TrustedProxies {
		if _, err := ParseTrustedProxy(tp); err != nil {
			add(fmt.Sprintf("$.receive.trusted_proxies[%d]", i), "receive.trusted_proxies[%d]: %v", i, err)
		}
	}
}

// validateSources checks every source and returns the index of each name,
// for the checks that refer to sources.
func (c *Config) validateSources(add, warn addFunc) map[string]int {
	kinds := senderkind.Builtin()
	seen := map[string]int{}
	for i, s := range c.Sources {
		checkSource(add, warn, kinds, i, s, seen)
	}
	return seen
}

// checkSource checks sources[i]. Only a source with no error so far gets
// its scheme built, whose errors would otherwise repeat the ones found.
func checkSource(add, warn addFunc, kinds *senderkind.Registry, i int, s Source, seen map[string]int) {
	_, known := kinds.Lookup(s.Kind)
	p := fmt.Sprintf("$.sources[%d]", i)
	found := 0
	counted := func(path, format string, args ...any) {
		found++
		add(path, format, args...)
	}
	checkSourceName(counted, p, i, s, seen)
	if s.Kind == "" {
		counted(p, "source %q: kind is required (one of %s)", s.Name, strings.Join(kindNames, ", "))
	} else if !known {
		counted(p+".kind", "source %q: unknown kind %q (one of %s)", s.Name, s.Kind, strings.Join(kindNames, ", "))
	}
	if len(s.Secrets) == 0 {
		counted(p, "source %q: secrets is required: at least one secret (several allow rotation)", s.Name)
	}
	for k, sec := range s.Secrets {
		if sec == "" {
			counted(fmt.Sprintf("%s.secrets[%d]", p, k), "source %q: secrets[%d] is empty (is its environment variable set to an empty value?)", s.Name, k)
		}
	}
	if s.Tolerance != nil && *s.Tolerance < 0 {
		counted(p+".tolerance", "source %q: tolerance must be positive", s.Name)
	}
	checkSourceKind(counted, warn, kinds, p, s)
	if s.API != nil && s.API.Timeout < 0 {
		counted(p+".api.timeout", "source %q: api.timeout must be positive", s.Name)
	}
	if found == 0 {
		// The scheme's own checks (secret formats, HMAC options) run
		// at load too, so a bad secret stops start-up with its line.
		if _, err := signature.New(s.schemeOptions(kinds)); err != nil {
			var oe *signature.OptionError
			if errors.As(err, &oe) {
				add(p+"."+oe.Field, "source %q: %s", s.Name, oe.Error())
			} else {
				add(p, "source %q: %v", s.Name, err)
			}
		}
	}
}

// checkSourceName checks sources[i]'s name, which becomes its path, and
// records it in seen so that a duplicate names the first.
func checkSourceName(add addFunc, p string, i int, s Source, seen map[string]int) {
	switch {
	case s.Name == "":
		add(p, "sources[%d]: name is required", i)
	case !validSourceName(s.Name):
		add(p+".name", "source name %q: use lowercase letters, digits, '-' and '_' (it becomes the path /hooks/%s)", s.Name, s.Name)
	default:
		if j, dup := seen[s.Name]; dup {
			add(p+".name", "duplicate source name %q (already used by sources[%d])", s.Name, j)
		} else {
			seen[s.Name] = i
		}
	}
}

// checkSourceKind checks the settings that only some kinds take, and
// reports the kind's own problems with the source.
func checkSourceKind(add, warn addFunc, kinds *senderkind.Registry, p string, s Source) {
	kind, known := kinds.Lookup(s.Kind)
	ks := s.KindSource()
	var kindWarns []senderkind.Problem
	for _, pr := range kind.Problems(ks) {
		if pr.Warning {
			kindWarns = append(kindWarns, pr)
			continue
		}
		add(fieldPath(p, pr.Field), "source %q: %s", s.Name, pr.Msg)
	}
	if s.Version != "" && len(kind.Scheme.Versions) == 0 {
		add(p+".version", "source %q: version applies to kind %s only", s.Name, strings.Join(versioned(kinds), ", "))
	}
	if s.PublicURL != "" {
		if u, err := url.Parse(s.PublicURL); err != nil || u.Scheme == "" || u.Host == "" {
			add(p+".public_url", "source %q: public_url %q is not an absolute URL", s.Name, s.PublicURL)
		}
	}
	if known && kind.Scheme.HMAC && s.HMAC == nil {
		add(p, "source %q: kind %s needs an hmac: block (header, algorithm, encoding, ...)", s.Name, s.Kind)
	}
	if !kind.Scheme.HMAC && s.HMAC != nil {
		add(p+".hmac", "source %q: the hmac block applies to kind hmac only", s.Name)
	}
	if known && kind.Identity.Params == nil && len(s.ExtraParams) > 0 {
		add(p+".extra_params", "source %q: extra_params applies to kind %s only, whose sender posts forms of documented parameters", s.Name, strings.Join(withParams(kinds), ", "))
	}
	if s.PublicURL == "" && kind.SignsURL(ks) {
		warn(p+".kind", "source %q: its scheme signs the URL the sender called, but public_url is not set, so the URL is rebuilt from the request's Host header (and http, or X-Forwarded-Proto from receive.trusted_proxies); set public_url to the exact URL configured at the sender", s.Name)
	}
	for _, pr := range kindWarns {
		warn(fieldPath(p, pr.Field), "source %q: %s", s.Name, pr.Msg)
	}
	if known && s.Account != "" && kind.Identity.Account == "" && s.Fields.Account == "" {
		// WH04 refuses a payload that names another tenant; a kind
		// whose events name none would pass every one.
		warn(p+".account", "source %q: kind %s carries no account in its events, so account: %q refuses nothing; set fields.account to where the sender names the tenant", s.Name, s.Kind, s.Account)
	}
}

// fieldPath is the YAML path of a field of the source at p; an empty field
// names the source itself.
func fieldPath(p, field string) string {
	if field == "" {
		return p
	}
	return p + "." + field
}

// withParams lists the kinds with a documented set of form parameters,
// which extra_params extends.
func withParams(kinds *senderkind.Registry) []string {
	var out []string
	for _, k := range kinds.Kinds() {
		if k.Identity.Params != nil {
			out = append(out, k.Name)
		}
	}
	return out
}

// versioned lists the kinds that take a version.
func versioned(kinds *senderkind.Registry) []string {
	var out []string
	for _, k := range kinds.Kinds() {
		if len(k.Scheme.Versions) > 0 {
			out = append(out, k.Name)
		}
	}
	return out
}

// ParseTrustedProxy reads one receive.trusted_proxies entry: an IP address
// or a CIDR prefix.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func validSourceName(n string) bool {
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return n != ""
}

// locate resolves each path to the line of the node it names, falling back
// to the nearest ancestor that exists (a missing key is reported at its
// parent).
func locate(file string, f *ast.File, errs []fieldError) error {
	out := make(Errors, 0, len(errs))
	for _, fe := range errs {
		e := &Error{File: file, Msg: fe.msg}
		for p := fe.path; p != "" && p != "$"; p = parentPath(p) {
			yp, err := yaml.PathString(p)
			if err != nil {
				continue
			}
			n, err := yp.FilterFile(f)
			if err != nil || n == nil {
				continue
			}
			if tk := n.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Col = tk.Position.Line, tk.Position.Column
			}
			break
		}
		out = append(out, e)
	}
	return out
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return ""
	}
	return p[:i]
}
