package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/hookledger/hookledger/internal/demo"
)

var devDestinationCommand = &command{
	name:    "dev-destination",
	summary: "a local destination for trying flows out: records calls, answers 200, fails on cue",
	run:     runDevDestination,
}

const devDestinationDescription = `Serves a destination for trying flows out on this machine: every call is
printed (one line: time, call number, method, path, status, body) and
answered 200 with {"ok":true,"call":N}, except the calls a --fail rule
matches, which get the rule's status. GET ` + demo.CallsPath + ` lists the calls
recorded (the newest 1000) as JSON. It prints its URL, then serves until
Ctrl-C or SIGTERM (exit 0).

A rule is space-separated key=value pairs; every condition given must hold,
and the first matching rule answers:

  path=PATTERN      the request path; * matches one segment (path.Match)
  body.FIELD=VALUE  a field of a JSON body (dotted: body.customer.id);
                    compared as text: a string's characters, 42, true, null
  method=METHOD     GET, POST, PUT, ...
  status=CODE       required: the status to answer, 400 to 599
  times=N           only the first N matching calls (then 200 again)

With the default classification a 4xx other than 408, 409 and 429 makes
the effect dead at once (permanent); a 5xx is retried by the destination's
retry policy, so a 5xx rule with times=N shows retries that end done. A
publishing endpoint that answers 410 is disabled. A destination (or
endpoint) on 127.0.0.1 needs allow_private_networks: true in the config.

Examples:
  hookledger dev-destination --fail 'path=/orders/ord_2 status=422'
  hookledger dev-destination --listen 127.0.0.1:9100 \
      --fail 'body.customer=cus_unknown status=422' \
      --fail 'path=/crm/deals/* status=503 times=2'`

// stringList collects a repeated flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, "; ") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func runDevDestination(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "dev-destination", "dev-destination [--listen ADDR] [--fail RULE]...", devDestinationDescription)
	listen := fs.String("listen", "127.0.0.1:9000", "`address` to listen on (127.0.0.1:0 picks a free port)")
	var fails stringList
	fs.Var(&fails, "fail", "answer a failing status to the calls `RULE` matches (repeatable; see above)")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "hookledger dev-destination: unexpected argument %q (a rule goes after --fail, quoted)\n", fs.Arg(0))
		return exitUsage
	}
	var rules []*demo.Rule
	for _, f := range fails {
		r, err := demo.ParseRule(f)
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger dev-destination: --fail %q: %v\n", f, err)
			return exitUsage
		}
		rules = append(rules, r)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		hint := ""
		if errors.Is(err, errAddrInUse) {
			hint = " (another program is using it: stop it, or pass --listen 127.0.0.1:0 for a free port)"
		}
		fmt.Fprintf(env.Stderr, "hookledger dev-destination: cannot listen on %s: %v%s\n", *listen, err, hint)
		return exitFail
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		fmt.Fprintf(env.Stderr, "hookledger dev-destination: WARNING: listening on %s, which other machines may reach: it answers and shows whatever it is sent\n", ln.Addr())
	}
	d := demo.StartDevDestination(ln, demo.DevOptions{Rules: rules, Out: env.Stdout})
	fmt.Fprintf(env.Stdout, "dev-destination listening on %s\n", d.URL())
	fmt.Fprintf(env.Stdout, "  calls recorded: curl -s %s%s\n", d.URL(), demo.CallsPath)
	for i, r := range rules {
		fmt.Fprintf(env.Stdout, "  rule %d: %s\n", i+1, r)
	}
	if len(rules) == 0 {
		fmt.Fprintln(env.Stdout, "  every call is answered 200 (--fail makes some fail)")
	}
	fmt.Fprintln(env.Stdout, "Ctrl-C stops it.")
	<-ctx.Done()
	if err := d.Close(); err != nil {
		fmt.Fprintf(env.Stderr, "hookledger dev-destination: %v\n", err)
		return exitFail
	}
	fmt.Fprintln(env.Stdout, "stopped")
	return exitOK
}
