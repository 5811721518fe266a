package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"os/exec"
	"runtime"

	"github.com/hookledger/hookledger/internal/demo"
)

var demoCommand = &command{
	name:    "demo",
	summary: "play the recovery dossier live against a real server, then open the console",
	run:     runDemo,
}

func runDemo(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "demo", "demo [--listen ADDR] [--dir DIR] [--speed N] [--no-open]",
		"Starts a real hookledger server (SQLite in a temporary directory, a random admin\n"+
			"token) with a built-in fake destination, and plays the recovery dossier with\n"+
			"signed webhooks, one line per step: a created order, a duplicate delivery, a\n"+
			"duplicate event, a cancellation, a late stale revision, a hang after the remote\n"+
			"side effect settled by a lookup, a 429 with Retry-After, a permanent 422, a\n"+
			"hidden failure, a mail the destination loses, a feedback loop, a missed\n"+
			"deadline, a compensation that cannot run and a source API that is down.\n"+
			"It then prints the outcome signals, the console URL with a one-time login\n"+
			"link and the admin token, and serves until Ctrl-C (exit 0).\n\n"+
			"The clock is real, so durations are shortened: a 20s deadline, verification\n"+
			"15s after a mail, retries of seconds. Nothing else needs to be installed.")
	listen := fs.String("listen", "127.0.0.1:8080", "`address` the server listens on (127.0.0.1:0 picks a free port)")
	dir := fs.String("dir", "", "`directory` for the config, store and log, kept after the demo (default: a temporary one, removed)")
	speed := fs.Float64("speed", 1.0, "divide the demo's durations by `N` (2 plays twice as fast)")
	noOpen := fs.Bool("no-open", false, "do not open the console in a browser")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if code, ok := checkArgs(env, "demo", fs.Args(), nil); !ok {
		return code
	}
	if *speed <= 0 {
		fmt.Fprintf(env.Stderr, "hookledger demo: --speed %v: want a positive number\n", *speed)
		return exitUsage
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		hint := ""
		if errors.Is(err, errAddrInUse) {
			hint = " (another hookledger or program is using it: stop it, or pass --listen 127.0.0.1:0 for a free port)"
		}
		fmt.Fprintf(env.Stderr, "hookledger demo: cannot listen on %s: %v%s\n", *listen, err, hint)
		return exitFail
	}
	var open func(string) error
	if !*noOpen && canOpenBrowser(env) {
		open = openBrowser
	}
	err = demo.Run(ctx, demo.Options{Listener: ln, Dir: *dir, Speed: *speed, Out: env.Stdout, Open: open})
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger demo: %v\n", err)
		return exitFail
	}
	return exitOK
}

// canOpenBrowser is false where no browser could show a page: a Linux
// session without a display (a server, a container, ssh).
func canOpenBrowser(env *Env) bool {
	switch runtime.GOOS {
	case "darwin", "windows":
		return true
	}
	return env.Getenv("DISPLAY") != "" || env.Getenv("WAYLAND_DISPLAY") != ""
}

// openBrowser hands the link to the desktop's opener and does not wait for
// the browser.
func openBrowser(link string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", link)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", link)
	default:
		cmd = exec.Command("xdg-open", link)
	}
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// errAddrInUse is how the operating system says a port is taken.
var errAddrInUse = addrInUse()
