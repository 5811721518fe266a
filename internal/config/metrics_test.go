package config

import (
	"errors"
	"strings"
	"testing"
)

func TestMetricsDefaultsAndSettings(t *testing.T) {
	c, err := Parse("h.yaml", []byte("listen: 127.0.0.1:8080\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Listen != "" || c.Metrics.Auth != metricsAuthNone || len(c.Warnings) != 0 {
		t.Errorf("default metrics = %+v, warnings %v; want open on the main listener, no warning on loopback", c.Metrics, c.Warnings)
	}
	c, err = Parse("h.yaml", []byte("admin: {token: t}\nmetrics:\n  listen: 127.0.0.1:9090\n  auth: token\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Listen != "127.0.0.1:9090" || c.Metrics.Auth != MetricsAuthToken {
		t.Errorf("metrics = %+v", c.Metrics)
	}
	// Port 0 picks a free port for each listener: not the same address.
	if _, err := Parse("h.yaml", []byte("listen: 127.0.0.1:0\nmetrics: {listen: 127.0.0.1:0}\n"), env(nil)); err != nil {
		t.Errorf("port 0 on both listeners: %v", err)
	}
}

func TestMetricsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"auth", "metrics:\n  auth: basic\n", 2, `metrics.auth: "basic" is not one of none, token`},
		{"listen", "metrics:\n  listen: 9090\n", 2, `metrics.listen: "9090" is not host:port (for example 127.0.0.1:9090)`},
		{"same listener", "listen: 127.0.0.1:8080\nmetrics:\n  listen: 127.0.0.1:8080\n", 3, "metrics.listen is listen (127.0.0.1:8080)"},
		{"token without admin.token", "metrics:\n  auth: token\n", 2, "metrics.auth: token needs admin.token"},
		{"unknown key", "metrics:\n  path: /m\n", 2, "unknown field \"path\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("h.yaml", []byte(tc.src), env(nil))
			var es Errors
			var e1 *Error
			switch {
			case errors.As(err, &es) && len(es) == 1:
				e1 = es[0]
			case errors.As(err, &e1):
			default:
				t.Fatalf("err = %v, want one config error", err)
			}
			if e1.File != "h.yaml" || e1.Line != tc.line || !strings.Contains(e1.Msg, tc.want) {
				t.Errorf("err = %v, want h.yaml:%d: …%s…", e1, tc.line, tc.want)
			}
		})
	}
}

// /metrics open on a listener other hosts can reach is warned about at
// load, with the key's line; on loopback, on its own listener or behind
// the token it is not.
func TestMetricsOpenOnPublicListenerWarns(t *testing.T) {
	for src, warns := range map[string]bool{
		"listen: 0.0.0.0:8080\n":                                     true,
		"listen: :8080\n":                                            true,
		"listen: 192.0.2.10:8080\n":                                  true,
		"listen: localhost:8080\n":                                   false,
		"listen: '[::1]:8080'\n":                                     false,
		"listen: :8080\nmetrics: {listen: 127.0.0.1:9090}\n":         false,
		"listen: :8080\nadmin: {token: t}\nmetrics: {auth: token}\n": false,
		"listen: :8080\nmetrics: {listen: 0.0.0.0:9090}\n":           true,
		"listen: :8080\nmetrics: {listen: 10.0.0.5:9090}\n":          false,
		"listen: :8080\nmetrics: {listen: ':9090'}\n":                true,
	} {
		c, err := Parse("h.yaml", []byte(src), env(nil))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		got := len(c.Warnings) == 1 && strings.Contains(c.Warnings[0].Msg, "/metrics is open to anyone") && c.Warnings[0].Line > 0
		if got != warns || len(c.Warnings) > 1 {
			t.Errorf("%q: warnings %v, want the open-metrics warning: %v", src, c.Warnings, warns)
		}
	}
}

// An operator verb does not need admin.token: metrics.auth: token with the
// token's variable unset loads.
func TestMetricsTokenWithUnresolvedTokenForOperators(t *testing.T) {
	src := "admin:\n  token: ${ADMIN_TOKEN}\nmetrics:\n  auth: token\n"
	if _, err := parseOperator("h.yaml", []byte(src), env(nil)); err != nil {
		t.Fatalf("ParseOperator: %v", err)
	}
	if _, err := Parse("h.yaml", []byte(src), env(map[string]string{"ADMIN_TOKEN": ""})); err == nil ||
		!strings.Contains(err.Error(), "metrics.auth: token needs admin.token") {
		t.Fatalf("Parse with an empty token: %v, want the metrics.auth error", err)
	}
}
