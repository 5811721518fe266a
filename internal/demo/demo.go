package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/server"
)

// Options configure one demo run.
type Options struct {
	// Listener is where the server listens; the caller binds it, so that
	// an address in use is reported before anything starts.
	Listener net.Listener
	// Dir holds the config, the SQLite store and the server log. Empty: a
	// temporary directory, removed when Run returns.
	Dir string
	// Speed divides the demo's durations (deadline, verification delay,
	// retries); 1 is the pace a person can follow.
	Speed float64
	// Out receives the script's lines, the signals and the login link.
	Out io.Writer
	// Logger receives the server's log; nil writes it to Dir/hookledger.log.
	Logger *slog.Logger
	// Open, when set, is given a second one-time login link to open in a
	// browser (the printed link stays usable).
	Open func(link string) error
}

// Store file and log file names inside Dir.
const (
	storeFile  = "hookledger.db"
	logFile    = "hookledger.log"
	configFile = "hookledger.yaml"
)

// Run sets up the directory, the fake destination and the server, plays
// the script, prints how to look at the result, and serves until ctx ends.
// It returns nil after a clean stop, or the first failure.
func Run(ctx context.Context, o Options) (err error) {
	if o.Listener == nil {
		return errors.New("demo: no listener")
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	dir, removeDir, err := demoDir(o.Dir)
	if err != nil {
		_ = o.Listener.Close()
		return err
	}
	defer removeDir()

	dest, err := startDestination()
	if err != nil {
		_ = o.Listener.Close()
		return err
	}
	defer func() {
		if cerr := dest.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	durations := durationsAt(o.Speed)
	cfg, err := writeConfig(dir, o.Listener.Addr().String(), dest, durations)
	if err != nil {
		_ = o.Listener.Close()
		return err
	}
	log, closeLog, err := serverLog(o.Logger, dir)
	if err != nil {
		_ = o.Listener.Close()
		return err
	}
	defer closeLog()

	srv := server.New(cfg, server.Options{Logger: log, Listener: o.Listener})
	srvCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Run(srvCtx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		return fmt.Errorf("demo: the server did not start: %w", err)
	}
	stopServer := func() error {
		stop()
		if err := <-done; err != nil {
			return fmt.Errorf("demo: server stop: %w", err)
		}
		return nil
	}

	base := "http://" + srv.Addr()
	printSetup(o.Out, base, dest.URL(), dir, o.Dir != "", durations)

	p, err := newPlayer(cfg, base, dest, o.Out, durations)
	if err != nil {
		return errors.Join(fmt.Errorf("demo: %w", err), stopServer())
	}
	if err := p.Play(ctx); err != nil {
		if ctx.Err() != nil { // Ctrl-C during the script is a normal stop
			return stopServer()
		}
		return errors.Join(fmt.Errorf("demo: %w", err), stopServer())
	}
	printAccess(o, srv, cfg, base)

	<-ctx.Done()
	fmt.Fprintln(o.Out, "\nstopping...")
	if err := stopServer(); err != nil {
		return err
	}
	fmt.Fprintln(o.Out, "stopped")
	return nil
}

// demoDir makes the demo's directory: dir, which must hold no demo store
// yet, or a temporary one that remove deletes.
func demoDir(dir string) (string, func(), error) {
	if dir == "" {
		dir, err := os.MkdirTemp("", "hookledger-demo-")
		if err != nil {
			return "", nil, fmt.Errorf("demo: temporary directory: %w", err)
		}
		return dir, func() { os.RemoveAll(dir) }, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("demo: --dir: %w", err)
	}
	// The script's event ids are fixed: a second run on the same store
	// would find every event a duplicate.
	if _, err := os.Stat(filepath.Join(dir, storeFile)); err == nil {
		return "", nil, fmt.Errorf("demo: %s already holds a demo store (%s): pick an empty directory, or serve it with hookledger serve --config %s",
			dir, storeFile, filepath.Join(dir, configFile))
	}
	return dir, func() {}, nil
}

// serverLog is the logger the server writes to: log when given, else a
// file in dir that closeLog closes.
func serverLog(log *slog.Logger, dir string) (_ *slog.Logger, closeLog func(), err error) {
	if log != nil {
		return log, func() {}, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: server log: %w", err)
	}
	return slog.New(slog.NewTextHandler(f, nil)), func() { f.Close() }, nil
}

// printSetup says what the demo started and where its files are, before
// the script plays.
func printSetup(out io.Writer, base, destURL, dir string, kept bool, durations demoDurations) {
	keep := "removed when the demo stops; --dir keeps it"
	if kept {
		keep = "kept"
	}
	fmt.Fprintf(out, "hookledger demo: a real server on %s with a fake destination on %s\n", base, destURL)
	fmt.Fprintf(out, "  config, SQLite store and server log in %s (%s)\n", dir, keep)
	fmt.Fprintf(out, "  durations shortened to be watched on a real clock: %s\n\n", durations.describe())
}

// writeConfig writes the demo's config into dir, with a fresh admin token
// and secret, and loads it back as the server will read it.
func writeConfig(dir, addr string, dest *Destination, durations demoDurations) (*config.Config, error) {
	yaml := demoConfig(configParams{Listen: addr, StoreURL: "sqlite:" + filepath.Join(dir, storeFile),
		AdminToken: "demo-" + randomHex(16), DestURL: dest.URL(), Secret: "demo-secret-" + randomHex(8), Durations: durations})
	cfgPath := filepath.Join(dir, configFile)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		return nil, fmt.Errorf("demo: write config: %w", err)
	}
	cfg, err := config.Load(cfgPath, func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("demo: the demo config does not load: %w", err)
	}
	return cfg, nil
}

// printAccess prints how to look at the result: the console, a one-time
// login link, the admin token and an API call; and opens the console when
// asked.
func printAccess(o Options, srv *server.Server, cfg *config.Config, base string) {
	link := srv.ConsoleLoginLink()
	fmt.Fprintf(o.Out, "\nConsole:     %s/\n", base)
	fmt.Fprintf(o.Out, "Log in once: %s\n", link)
	fmt.Fprintf(o.Out, "             (one-time link, valid 15 minutes; after that log in with the admin token)\n")
	fmt.Fprintf(o.Out, "Admin token: %s\n", cfg.Admin.Token)
	fmt.Fprintf(o.Out, "Admin API:   curl -H 'Authorization: Bearer %s' %s/api/v1/signals\n", cfg.Admin.Token, base)
	if o.Open != nil {
		if err := o.Open(srv.ConsoleLoginLink()); err != nil {
			fmt.Fprintf(o.Out, "             (could not open a browser: %v)\n", err)
		}
	}
	fmt.Fprintf(o.Out, "\nThe server keeps running: press Ctrl-C to stop it.\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b)
}
