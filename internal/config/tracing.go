package config

import (
	"fmt"
	"net/url"
	"slices"
)

// Tracing configures OpenTelemetry traces (docs/tracing.md). Every key
// may be left to the standard OTEL_* variables instead; what the block
// sets comes first.
type Tracing struct {
	// Enabled turns tracing on; an endpoint (here or in
	// OTEL_EXPORTER_OTLP_ENDPOINT) does too.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP collector's base URL: http://host:4318 for
	// OTLP/HTTP (traces go to its /v1/traces), http://host:4317 for gRPC.
	Endpoint string `yaml:"endpoint"`
	// Protocol is http/protobuf (the default) or grpc.
	Protocol string `yaml:"protocol"`
	// SampleRatio is the share of traces recorded, 0 to 1 (default: all,
	// or OTEL_TRACES_SAMPLER's choice).
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName names the process in the traces (default hookledger).
	ServiceName string `yaml:"service_name"`
	// TrustedSources are the sources whose requests' traceparent becomes
	// the parent of the receive span; any other sender's is only linked,
	// so that no one outside can choose hookledger's trace ids or force
	// its sampling.
	TrustedSources []string `yaml:"trusted_sources"`
}

func (c *Config) validateTracing(add func(path, format string, args ...any)) {
	t := c.Tracing
	switch t.Protocol {
	case "", "http/protobuf", "grpc":
	default:
		add("$.tracing.protocol", "tracing.protocol: %q is not one of http/protobuf, grpc", t.Protocol)
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		add("$.tracing.sample_ratio", "tracing.sample_ratio: %v is not between 0 and 1", *r)
	}
	for i, name := range t.TrustedSources {
		if !slices.ContainsFunc(c.Sources, func(s Source) bool { return s.Name == name }) {
			add(fmt.Sprintf("$.tracing.trusted_sources[%d]", i), "tracing.trusted_sources[%d]: no source named %q is configured", i, name)
		}
	}
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("$.tracing.endpoint", "tracing.endpoint: %q is not an http:// or https:// URL (for example http://127.0.0.1:4318)", t.Endpoint)
		}
	}
}
