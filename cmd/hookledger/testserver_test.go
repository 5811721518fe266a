package main

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/server"
)

// listenLocal binds 127.0.0.1:0, so a config can name the server's URL
// before it starts.
func listenLocal(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String()
}

func startServerOn(t *testing.T, ln net.Listener, cfgPath string, lookup map[string]string) {
	t.Helper()
	cfg, err := config.Load(cfgPath, func(k string) (string, bool) { v, ok := lookup[k]; return v, ok })
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := server.New(cfg, server.Options{Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v", err)
		}
	})
}
