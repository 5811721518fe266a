package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/authlimit"
	"github.com/hookledger/hookledger/internal/config"
)

// guessLimit is the count of wrong admin tokens per client address. It
// believes the forwarding headers of receive.trusted_proxies only, as the
// receiver does: behind a proxy every client would otherwise share its
// address and one guesser would lock out all.
func (s *Server) guessLimit() *authlimit.Limiter {
	var proxies []netip.Prefix
	for _, tp := range s.cfg.Receive.TrustedProxies {
		// config.Load has refused any entry that does not parse.
		if p, err := config.ParseTrustedProxy(tp); err == nil {
			proxies = append(proxies, p)
		}
	}
	return authlimit.New(authlimit.Options{Now: s.clk.Now, TrustedProxies: proxies})
}

// metricsHandler serves GET /metrics from the server's registry, behind
// admin.token when metrics.auth is token.
func (s *Server) metricsHandler(guard *authlimit.Limiter) http.Handler {
	h := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
	if s.cfg.Metrics.Auth != config.MetricsAuthToken {
		return h
	}
	return api.NewBearer(s.cfg.Admin.Token, guard, s.log, "metrics").Wrap(h)
}

// listenMetrics opens metrics.listen and returns a server for it that
// answers GET /metrics and nothing else; all nil when /metrics is served
// on the main listener.
func (s *Server) listenMetrics(metrics http.Handler) (*http.Server, net.Listener, error) {
	if s.cfg.Metrics.Listen == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", s.cfg.Metrics.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on metrics.listen %s: %w", s.cfg.Metrics.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	return s.httpServer(mux), ln, nil
}

// httpServer is an HTTP server for h with the bounds of receive: on what
// one request may cost.
func (s *Server) httpServer(h http.Handler) *http.Server {
	rc := s.cfg.Receive
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: rc.ReadHeaderTimeout.D(),
		ReadTimeout:       rc.ReadTimeout.D(),
		WriteTimeout:      rc.WriteTimeout.D(),
		IdleTimeout:       rc.IdleTimeout.D(),
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}
