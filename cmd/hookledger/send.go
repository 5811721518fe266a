package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

var sendCommand = &command{
	name:    "send",
	summary: "sign an event as a source's sender would and post it (built-in samples per kind)",
	run:     runSend,
}

const sendDescription = `Signs a body the way the named source's sender would and posts it to the URL
it signed for: --url, else the source's public_url, else
http://LISTEN/hooks/SOURCE from the config's listen address. Prints the
answer's status and body; exit 0 on a 2xx answer, 1 otherwise.

The body is FILE, or standard input for '-'. Without either, a built-in
sample event of the source's kind is sent (--list-samples shows them):
each send gets fresh event ids and the current time, written where that
kind carries them (in the body, or in a header such as Standard Webhooks'
webhook-id), and the source's account when it has one. --event-id fixes the id instead, to send the same
event twice. A FILE is sent byte for byte; --event-id then only sets
header-borne ids.

Only the named source's secrets need to be set.

Examples:
  hookledger send --source stripe
  hookledger send --source stripe --event-id evt_1   # twice: the second is a duplicate
  hookledger send --source app /tmp/event.json`

func runSend(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "send",
		"send [--config FILE] --source NAME [--event-id ID] [--url URL] [--sample NAME] [FILE|-]\n"+
			"       hookledger send --list-samples",
		sendDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	sourceName := fs.String("source", "", "source `name` from the config (required)")
	eventID := fs.String("event-id", "", "event `id` to send (default: a fresh one per send)")
	target := fs.String("url", "", "`URL` to sign for and post to (default: public_url, else http://LISTEN/hooks/NAME)")
	sampleName := fs.String("sample", "", "built-in sample `name` to send (default: the kind's first; see --list-samples)")
	list := fs.Bool("list-samples", false, "list the built-in samples per kind and exit")
	files, code, ok := parseInterspersed(env, fs, args)
	if !ok {
		return code
	}
	if *list {
		if len(files) > 0 || *sourceName != "" {
			fmt.Fprintln(env.Stderr, "hookledger send: --list-samples takes no other arguments")
			return exitUsage
		}
		return listSamples(env)
	}
	if *sourceName == "" {
		fmt.Fprintln(env.Stderr, "hookledger send: --source is required")
		return exitUsage
	}
	if len(files) > 1 {
		fmt.Fprintf(env.Stderr, "hookledger send: expected at most one FILE, got %d arguments\n", len(files))
		return exitUsage
	}
	if len(files) == 1 && *sampleName != "" {
		fmt.Fprintln(env.Stderr, "hookledger send: give either FILE or --sample, not both")
		return exitUsage
	}
	cfg, code := loadOperatorConfig(env, "send", *cfgPath)
	if cfg == nil {
		return code
	}
	src, scheme, code := signingSource(env, "send", cfg, *sourceName)
	if src == nil {
		return code
	}
	u := *target
	if u == "" {
		u = sourceURL(cfg, src)
	}

	now := time.Now()
	kind, _ := senderkind.Builtin().Lookup(src.Kind)
	body, hdrID, extra, code := sendBody(env, kind, src, files, *sampleName, *eventID, now)
	if body == nil {
		return code
	}
	u, h, body, err := signForSend(kind, scheme, u, body, now, hdrID)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger send: %v\n", err)
		return exitFail
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger send: --url %q: %v\n", u, err)
		return exitUsage
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range extra {
		req.Header[k] = vs
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", "hookledger-send/"+buildVersion())
	client := &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger send: POST %s: %v\n", u, err)
		return exitFail
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(env.Stdout, "POST %s: %s\n", u, resp.Status)
	if a := strings.TrimRight(string(answer), "\n"); a != "" {
		fmt.Fprintln(env.Stdout, termSafe(a))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return exitFail
	}
	return exitOK
}

// signForSend signs body as the source's sender would: inside the body
// for a scheme that signs there (signature.BodySigner), else in headers
// (signRequest). It returns the URL to post to, the signature headers and
// the body to send.
func signForSend(k senderkind.Kind, scheme signature.Scheme, u string, body []byte, now time.Time, id string) (string, http.Header, []byte, error) {
	if bs, ok := scheme.(signature.BodySigner); ok {
		req := &signature.Request{Method: http.MethodPost, URL: u, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
		signed, err := bs.SignBody(req, now)
		if err != nil {
			return "", nil, nil, err
		}
		return u, http.Header{}, signed, nil
	}
	u, h, err := signRequest(k, scheme, u, body, now, id)
	return u, h, body, err
}

// sendBody is the body send posts: FILE, standard input, or the named
// built-in sample (the kind's default without one) filled with fresh
// identities, or --event-id. It returns the id for a scheme that signs it
// in a header and the headers the request must carry besides the
// signature; a nil body comes with the exit code.
func sendBody(env *Env, kind senderkind.Kind, src *config.Source, files []string, sample, id string, now time.Time) ([]byte, string, http.Header, int) {
	hdrID := id
	if hdrID == "" {
		hdrID = "msg_" + uuid.NewString()
	}
	var body []byte
	var err error
	extra := http.Header{}
	switch {
	case len(files) == 1 && files[0] == "-":
		body, err = io.ReadAll(env.Stdin)
	case len(files) == 1:
		body, err = os.ReadFile(files[0])
	default:
		if sample == "" {
			sample = kind.Sample
		}
		if sample == "" {
			fmt.Fprintf(env.Stderr, "hookledger send: kind %s has no built-in sample; give a FILE (or - for standard input)\n", src.Kind)
			return nil, "", nil, exitUsage
		}
		raw, ok := kind.SampleBody(sample)
		if !ok {
			fmt.Fprintf(env.Stderr, "hookledger send: no sample %q for kind %s (samples: %s)\n", sample, src.Kind, strings.Join(kind.SampleNames(), ", "))
			return nil, "", nil, exitUsage
		}
		body, hdrID, extra, err = kind.FillSample(raw, senderkind.SampleOptions{
			Source: src.KindSource(), Account: src.Account, ID: id, Now: now,
		})
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger send: read body: %v\n", err)
		return nil, "", nil, exitFail
	}
	if body == nil {
		body = []byte{}
	}
	return body, hdrID, extra, exitOK
}

func listSamples(env *Env) int {
	var kinds []senderkind.Kind
	for _, k := range senderkind.Builtin().Kinds() {
		if k.Sample != "" {
			kinds = append(kinds, k)
		}
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].Name < kinds[j].Name })
	for _, k := range kinds {
		var names []string
		for _, n := range k.SampleNames() {
			if n == k.Sample {
				n += " (default)"
			}
			names = append(names, n)
		}
		note := ""
		if k.SampleNote != "" {
			note = "  [" + k.SampleNote + "]"
		}
		fmt.Fprintf(env.Stdout, "%-18s %s%s\n", k.Name, strings.Join(names, ", "), note)
	}
	return exitOK
}
