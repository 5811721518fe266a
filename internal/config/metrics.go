package config

import (
	"net"
	"net/netip"
	"strings"
)

// Values of metrics.auth.
const (
	// metricsAuthNone serves /metrics to anyone who reaches its listener.
	metricsAuthNone = "none"
	// MetricsAuthToken asks for admin.token as a bearer token, as the
	// admin API does.
	MetricsAuthToken = "token"
)

// Metrics says where GET /metrics is served and who may read it. The
// metrics name sources, flows and destinations and show volumes and
// signal values, so a listener that senders reach from the internet
// should not serve them to everyone (docs/deploy.md).
type Metrics struct {
	// Listen, when set, serves /metrics on a listener of its own, and
	// only there: the main listener then answers 404 for it.
	Listen string `yaml:"listen"`
	// Auth is none (the default) or token.
	Auth string `yaml:"auth"`
}

func (c *Config) setMetricsDefaults() {
	if c.Metrics.Auth == "" {
		c.Metrics.Auth = metricsAuthNone
	}
}

// validateMetrics checks the metrics block, and warns when the default
// leaves /metrics open on a listener other hosts can reach.
func (c *Config) validateMetrics(add, warn func(path, format string, args ...any)) {
	m := c.Metrics
	switch m.Auth {
	case metricsAuthNone:
	case MetricsAuthToken:
		// An operator verb without the token's variable loads: it serves
		// nothing.
		if c.Admin.Token == "" && !c.unresolved("admin.token") {
			add("$.metrics.auth", "metrics.auth: token needs admin.token: without it /metrics would refuse every scrape")
		}
	default:
		add("$.metrics.auth", "metrics.auth: %q is not one of none, token", m.Auth)
	}
	if m.Listen != "" {
		_, port, err := net.SplitHostPort(m.Listen)
		switch {
		case err != nil:
			add("$.metrics.listen", "metrics.listen: %q is not host:port (for example 127.0.0.1:9090)", m.Listen)
		case m.Listen == c.Listen && port != "0":
			add("$.metrics.listen", "metrics.listen is listen (%s): give it an address of its own, or leave it out to serve /metrics on the main listener", m.Listen)
		}
	}
	open := m.Auth == metricsAuthNone
	if open && m.Listen == "" && !loopback(c.Listen) {
		warn("$.listen", "/metrics is open to anyone who can reach listen (%s), senders included: it names sources, flows and destinations and shows volumes and signal values; set metrics.listen to a private address or metrics.auth: token (docs/deploy.md)", c.Listen)
	}
	if open && m.Listen != "" && everyInterface(m.Listen) {
		warn("$.metrics.listen", "/metrics is open to anyone who can reach metrics.listen (%s), on every interface: bind it to a private address or set metrics.auth: token (docs/deploy.md)", m.Listen)
	}
}

// everyInterface reports whether a listen address accepts connections on
// every interface (no host, 0.0.0.0 or ::).
func everyInterface(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return host == "" || err == nil && a.IsUnspecified()
}

// loopback reports whether a listen address accepts connections from
// this host only.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// unresolved reports whether the secret-bearing field (such as
// admin.token) was left empty by an operator load because its variable is
// not set.
func (c *Config) unresolved(field string) bool {
	for _, u := range c.UnresolvedSecrets {
		if u.Field == field {
			return true
		}
	}
	return false
}
