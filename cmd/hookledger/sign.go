package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
)

var signCommand = &command{
	name:    "sign",
	summary: "print the headers a source's sender would send for a body",
	run:     runSign,
}

func runSign(_ context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "sign", "sign --config FILE --source NAME [--event-id ID] [--url URL] [--headers webhook|svix] [--format headers|curl] [BODY_FILE|-]",
		"Signs a body the way the named source's sender would and prints the headers,\n"+
			"one 'Name: value' per line (or curl -H arguments with --format curl), for\n"+
			"trying a configured source with curl and for tests. The body is read from\n"+
			"BODY_FILE, or from standard input when it is '-' or absent.\n\n"+
			"For a standard-webhooks source, --headers svix writes the svix-id,\n"+
			"svix-timestamp and svix-signature names that Svix-powered senders use\n"+
			"instead of webhook-id, webhook-timestamp and webhook-signature; the\n"+
			"signature is the same.\n\n"+
			"Twilio and Square sign the URL they call: the source's public_url, or\n"+
			"--url. For a twilio source a form body is signed with its parameters and\n"+
			"gets a Content-Type header; a JSON body is signed over the URL with its\n"+
			"bodySHA256 parameter, which is reported on standard error.\n\n"+
			"'hookledger send' signs and posts in one step.\n\n"+
			"Example:\n"+
			"  hookledger sign --source stripe /tmp/event.json |\n"+
			"    curl -H @- --data-binary @/tmp/event.json http://127.0.0.1:8080/hooks/stripe")
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	sourceName := fs.String("source", "", "source `name` from the config (required)")
	eventID := fs.String("event-id", "", "event `id` for senders that carry it in a header (standard-webhooks webhook-id or svix-id, github X-GitHub-Delivery, shopify X-Shopify-Event-Id); a fresh one when empty")
	target := fs.String("url", "", "`URL` the request is sent to, for schemes that sign it (HubSpot v2/v3, Twilio, Square); default public_url or http://LISTEN/hooks/NAME")
	format := fs.String("format", "headers", "output `format`: headers or curl")
	headerSet := fs.String("headers", "", "header `names` for standard-webhooks sources: webhook or svix (default webhook)")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if *sourceName == "" {
		fmt.Fprintln(env.Stderr, "hookledger sign: --source is required")
		return exitUsage
	}
	if *format != "headers" && *format != "curl" {
		fmt.Fprintf(env.Stderr, "hookledger sign: --format %q: want headers or curl\n", *format)
		return exitUsage
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(env.Stderr, "hookledger sign: expected at most one BODY_FILE, got %d arguments\n", fs.NArg())
		return exitUsage
	}
	cfg, code := loadOperatorConfig(env, "sign", *cfgPath)
	if cfg == nil {
		return code
	}
	src, scheme, code := signingSource(env, "sign", cfg, *sourceName)
	if src == nil {
		return code
	}
	kind, _ := senderkind.Builtin().Lookup(src.Kind)
	hs, named := kind.Sign.HeaderSet(*headerSet)
	switch {
	case *headerSet != "" && len(kind.Sign.HeaderSets) == 0:
		fmt.Fprintf(env.Stderr, "hookledger sign: --headers applies to sources whose sender has several header sets (standard-webhooks); source %s is of kind %s\n", src.Name, src.Kind)
		return exitUsage
	case *headerSet != "" && !named:
		fmt.Fprintf(env.Stderr, "hookledger sign: --headers %q: want %s\n", *headerSet, headerSetNames(kind.Sign))
		return exitUsage
	}

	var body []byte
	var err error
	if fs.NArg() == 0 || fs.Arg(0) == "-" {
		body, err = io.ReadAll(env.Stdin)
	} else {
		body, err = os.ReadFile(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger sign: read body: %v\n", err)
		return exitFail
	}

	u := *target
	if u == "" {
		u = sourceURL(cfg, src)
	}
	id := *eventID
	if id == "" {
		id = "msg_" + uuid.NewString()
	}
	signedURL, h, err := signRequest(kind, scheme, u, body, time.Now(), id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger sign: %v\n", err)
		return exitFail
	}
	if signedURL != u {
		// Twilio signs a JSON body through a bodySHA256 parameter of the
		// URL it calls, so the request must go to that URL.
		fmt.Fprintf(env.Stderr, "hookledger sign: signed for %s; post the body there\n", signedURL)
	}
	if named {
		h = hs.Rename(h)
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h.Values(k) {
			if *format == "curl" {
				fmt.Fprintf(env.Stdout, "-H %s ", shellQuote(k+": "+v))
			} else {
				fmt.Fprintf(env.Stdout, "%s: %s\n", k, v)
			}
		}
	}
	if *format == "curl" {
		fmt.Fprintln(env.Stdout)
	}
	return exitOK
}

// signRequest signs body for a source of kind k posted to u: the URL
// becomes the one the sender would call for this body (Twilio's bodySHA256
// for JSON), a form-posting sender's non-JSON body is signed as a form, and
// the kind's id header (X-GitHub-Delivery, X-Shopify-Event-Id) carries id.
// It returns the URL to post to and the headers, Content-Type among them.
func signRequest(k senderkind.Kind, scheme signature.Scheme, u string, body []byte, now time.Time, id string) (string, http.Header, error) {
	if k.Sign.URL != nil {
		u = k.Sign.URL(u, body)
	}
	ctype := "application/json"
	if k.Identity.Form && !looksJSON(body) {
		ctype = "application/x-www-form-urlencoded"
	}
	req := &signature.Request{Method: http.MethodPost, URL: u, Header: http.Header{"Content-Type": {ctype}}, Body: body}
	h, err := scheme.Sign(req, now, id)
	if err != nil {
		return "", nil, err
	}
	if k.Sign.IDHeader != "" {
		h.Set(k.Sign.IDHeader, id)
	}
	if k.Identity.Form {
		h.Set("Content-Type", ctype)
	}
	return u, h, nil
}

// looksJSON reports whether body is a JSON object or array.
func looksJSON(body []byte) bool {
	b := bytes.TrimSpace(body)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// headerSetNames lists the header sets a kind's sign accepts, for messages.
func headerSetNames(s senderkind.Sign) string {
	names := make([]string, len(s.HeaderSets))
	for i, hs := range s.HeaderSets {
		names[i] = hs.Name
	}
	return strings.Join(names, " or ")
}

// shellQuote single-quotes s for a POSIX shell.
func shellQuote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, `'\''`...)
		} else {
			out = append(out, s[i])
		}
	}
	return string(append(out, '\''))
}

// signingSource finds the named source and builds its signing scheme. The
// config is loaded without secrets (other sources' variables need not be
// set), so this source's own secrets are checked here: every one set, and
// in the format its scheme takes.
func signingSource(env *Env, verb string, cfg *config.Config, name string) (*config.Source, signature.Scheme, int) {
	var src *config.Source
	idx := -1
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == name {
			src, idx = &cfg.Sources[i], i
		}
	}
	if src == nil {
		names := make([]string, 0, len(cfg.Sources))
		for _, s := range cfg.Sources {
			names = append(names, s.Name)
		}
		fmt.Fprintf(env.Stderr, "hookledger %s: no source %q in %s (sources: %v)\n", verb, name, cfg.Path, names)
		return nil, nil, exitUsage
	}
	prefix := fmt.Sprintf("sources[%d].secrets", idx)
	for _, u := range cfg.UnresolvedSecrets {
		if strings.HasPrefix(u.Field, prefix) {
			fmt.Fprintf(env.Stderr, "hookledger %s: %s:%d: source %s: environment variable %s is not set (its secret signs the request)\n",
				verb, cfg.Path, u.Line, src.Name, u.Var)
			return nil, nil, exitUsage
		}
	}
	scheme, err := signature.New(src.SchemeOptions())
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger %s: source %s: %v\n", verb, src.Name, err)
		return nil, nil, exitUsage
	}
	return src, scheme, exitOK
}

// sourceURL is the URL a sender calls for the source: its public_url, else
// the listen address with a wildcard host made dialable.
func sourceURL(cfg *config.Config, src *config.Source) string {
	if src.PublicURL != "" {
		return src.PublicURL
	}
	return "http://" + dialable(cfg.Listen) + "/hooks/" + src.Name
}

// dialable turns a listen address into one a client can dial: a wildcard
// host becomes the loopback address.
func dialable(listen string) string {
	h, p, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if h == "" || h == "0.0.0.0" || h == "::" {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, p)
}
