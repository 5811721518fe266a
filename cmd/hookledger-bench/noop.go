package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/server"
)

func runNoop(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "noop", "noop [--listen 127.0.0.1:0] [--durable FILE]",
		"Serves a handler that reads the request body and answers 200 with a small JSON\n"+
			"body: the ceiling of what any receiver can reach on this machine with this load\n"+
			"generator. With --durable, the body is first appended to FILE (a preallocated\n"+
			"256 MiB ring) and the answer waits for a shared fdatasync: the floor of any\n"+
			"receiver that acknowledges only durable data. Logs one JSON line with its\n"+
			"address on stderr; SIGTERM stops it.")
	listen := fs.String("listen", "127.0.0.1:0", "loopback `address` to listen on")
	durable := fs.String("durable", "", "append each body to this `file` and fdatasync before answering")
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	var err error
	if *durable != "" {
		err = serveFloor(ctx, stderr, *listen, *durable)
	} else {
		err = serveNoop(ctx, stderr, *listen)
	}
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench noop: %v\n", err)
		return exitFail
	}
	return exitOK
}

func serveNoop(ctx context.Context, stderr io.Writer, listen string) error {
	// Same shape of answer as hookledger's receiver, so both servers write
	// the same bytes back.
	return serveHandler(ctx, stderr, listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"status":"stored","events":1}`+"\n")
	}))
}

// serveHandler serves h on a loopback address until ctx ends.
func serveHandler(ctx context.Context, stderr io.Writer, listen string, h http.Handler) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: the benchmark servers listen on loopback only", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
	}
	log.Info("noop serving", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

func runServe(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "serve", "serve --config FILE [--cpuprofile FILE]",
		"Runs hookledger's server (the same server.Run as 'hookledger serve') in this process,\n"+
			"logging JSON on stderr, and writes a CPU profile of the whole run when asked. The\n"+
			"receive benchmark starts it with --cpuprofile to find where the time goes; the\n"+
			"profiling lives here so that the product binary carries none of it.")
	cfgPath := fs.String("config", "", "configuration `file`")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to `file`")
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "hookledger-bench serve: --config is required")
		return exitUsage
	}
	cfg, err := config.Load(*cfgPath, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench serve: invalid configuration:\n%v\n", err)
		return exitUsage
	}
	if err := serveProfiled(ctx, stderr, cfg, *cpuProfile); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench serve: %v\n", err)
		return exitFail
	}
	return exitOK
}

func serveProfiled(ctx context.Context, stderr io.Writer, cfg *config.Config, cpuProfile string) (err error) {
	stop, err := startCPUProfile(cpuProfile)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer func() { err = errors.Join(err, stop()) }()
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	return server.New(cfg, server.Options{Logger: log}).Run(ctx)
}

// startCPUProfile starts a CPU profile written to path; with no path it
// does nothing. The function it returns stops the profile and closes the
// file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
