package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/senderkind"
)

var sendCommand = &command{
	name:    "send",
	summary: "sign an event as a source's sender would and post it (built-in samples per kind)",
	run:     runSend,
}

// samples are the built-in events, one directory per source kind.
//
//go:embed samples
var samples embed.FS

// defaultSample names the sample send uses for a kind without --sample:
// the kind's own, from the registry.
func defaultSample(kind string) string {
	k, _ := senderkind.Builtin().Lookup(kind)
	return k.Sample
}

const sendDescription = `Signs a body the way the named source's sender would and posts it to the URL
it signed for: --url, else the source's public_url, else
http://LISTEN/hooks/SOURCE from the config's listen address. Prints the
answer's status and body; exit 0 on a 2xx answer, 1 otherwise.

The body is FILE, or standard input for '-'. Without either, a built-in
sample event of the source's kind is sent (--list-samples shows them):
each send gets fresh event ids and the current time, written where that
kind carries them (the body for Stripe, HubSpot, Klaviyo, Pipedrive, Slack,
Paddle, Square and hmac; the webhook-id header for Standard Webhooks), and the source's
account when it has one. --event-id fixes the id instead, to send the same
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
	id := *eventID
	hdrID := id
	if hdrID == "" {
		hdrID = "msg_" + uuid.NewString()
	}
	extra := http.Header{}
	var body []byte
	var err error
	switch {
	case len(files) == 1 && files[0] == "-":
		body, err = io.ReadAll(env.Stdin)
	case len(files) == 1:
		body, err = os.ReadFile(files[0])
	default:
		name := *sampleName
		if name == "" {
			name = defaultSample(src.Kind)
		}
		if name == "" {
			fmt.Fprintf(env.Stderr, "hookledger send: kind %s has no built-in sample; give a FILE (or - for standard input)\n", src.Kind)
			return exitUsage
		}
		var s []byte
		s, err = samples.ReadFile(path.Join("samples", src.Kind, name+".json"))
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger send: no sample %q for kind %s (samples: %s)\n", name, src.Kind, strings.Join(sampleNames(src.Kind), ", "))
			return exitUsage
		}
		body, hdrID, err = fillSample(s, src, id, now, extra)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger send: read body: %v\n", err)
		return exitFail
	}

	kind, _ := senderkind.Builtin().Lookup(src.Kind)
	u, h, err := signRequest(kind, scheme, u, body, now, hdrID)
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

// fillSample gives a sample fresh identities and times, and the source's
// account. id, when set, is the event id to use; it returns the body and
// the id for schemes that sign it in a header. Headers the source reads
// its id from (fields.event_id: header:NAME) go into extra.
func fillSample(raw []byte, src *config.Source, id string, now time.Time, extra http.Header) ([]byte, string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	// Numbers keep their digits: HubSpot object ids exceed 2^53.
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, "", fmt.Errorf("sample: %w", err)
	}
	fresh := func(prefix string) string {
		if prefix == "uuid" {
			return uuid.NewString()
		}
		return prefix + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
	}
	// nth is the id of a batch's n-th event: --event-id for the first,
	// then suffixed, so a batch never repeats one event.
	nth := func(n int, prefix string) string {
		switch {
		case id == "":
			return fresh(prefix)
		case n == 0:
			return id
		}
		return id + "-" + strconv.Itoa(n+1)
	}
	hdrID := id
	account := func(v string) any {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return json.Number(strconv.FormatInt(n, 10))
		}
		return v
	}
	secs := json.Number(strconv.FormatInt(now.Unix(), 10))
	rfc := now.UTC().Format(time.RFC3339)
	switch src.Kind {
	case senderkind.Stripe:
		setPath(doc, "id", nth(0, "evt_"))
		setPath(doc, "created", secs)
		if src.Account != "" {
			setPath(doc, "account", src.Account)
		}
	case senderkind.HubSpot:
		list, _ := doc.([]any)
		for i, e := range list {
			if id == "" {
				n, _ := rand.Int(rand.Reader, big.NewInt(1<<40))
				setPath(e, "eventId", json.Number(n.String()))
			} else {
				setPath(e, "eventId", nth(i, ""))
			}
			if id == "" {
				// occurredAt is part of HubSpot's event identity: a fixed
				// --event-id keeps the sample's, so a resend is the same
				// event.
				setPath(e, "occurredAt", json.Number(strconv.FormatInt(now.UnixMilli()+int64(i), 10)))
			}
			if src.Account != "" {
				setPath(e, "portalId", account(src.Account))
			}
		}
	case senderkind.Klaviyo:
		list, _ := getPath(doc, "data").([]any)
		for i, e := range list {
			eid := nth(i, "")
			setPath(e, "external_id", eid)
			setPath(e, "payload.data.id", eid)
			setPath(e, "payload.data.attributes.timestamp", secs)
			setPath(e, "payload.data.attributes.datetime", rfc)
		}
		setPath(doc, "meta.timestamp", rfc)
		if src.Account != "" {
			setPath(doc, "meta.klaviyo_account_id", src.Account)
		}
	case senderkind.StandardWebhooks:
		setPath(doc, "timestamp", now.UTC().Format(time.RFC3339Nano))
		if hdrID == "" {
			hdrID = fresh("msg_")
		}
	case senderkind.Pipedrive:
		setPath(doc, "meta.id", nth(0, "uuid"))
		setPath(doc, "meta.timestamp", now.UTC().Format("2006-01-02T15:04:05.000Z"))
		if src.Account != "" {
			setPath(doc, "meta.company_id", account(src.Account))
		}
	case senderkind.Slack:
		setPath(doc, "event_id", nth(0, "Ev"))
		setPath(doc, "event_time", secs)
		if src.Account != "" {
			setPath(doc, "team_id", src.Account)
		}
	case senderkind.Paddle:
		setPath(doc, "event_id", nth(0, "evt_"))
		setPath(doc, "notification_id", fresh("ntf_"))
		setPath(doc, "occurred_at", now.UTC().Format("2006-01-02T15:04:05.000000Z"))
	case senderkind.Square:
		setPath(doc, "event_id", nth(0, "uuid"))
		setPath(doc, "created_at", now.UTC().Format("2006-01-02T15:04:05.000Z"))
		if src.Account != "" {
			setPath(doc, "merchant_id", src.Account)
		}
	case senderkind.HMAC:
		eid := nth(0, "ev_")
		switch p := src.Fields.EventID; {
		case strings.HasPrefix(p, "header:"):
			extra.Set(strings.TrimPrefix(p, "header:"), eid)
		case p != "":
			setPath(doc, strings.TrimPrefix(p, "$."), eid)
		default:
			setPath(doc, "eventId", eid)
		}
		switch p := src.Fields.OccurredAt; {
		case p == "":
			setPath(doc, "occurredAt", rfc)
		case !strings.HasPrefix(p, "header:"):
			setPath(doc, strings.TrimPrefix(p, "$."), rfc)
		}
	}
	if hdrID == "" {
		hdrID = "msg_" + uuid.NewString()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, "", fmt.Errorf("sample: %w", err)
	}
	return buf.Bytes(), hdrID, nil
}

// getPath and setPath address a dotted path of object keys.
func getPath(doc any, p string) any {
	for _, k := range strings.Split(p, ".") {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		doc = m[k]
	}
	return doc
}

func setPath(doc any, p string, v any) {
	keys := strings.Split(p, ".")
	for _, k := range keys[:len(keys)-1] {
		m, ok := doc.(map[string]any)
		if !ok {
			return
		}
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		doc = next
	}
	if m, ok := doc.(map[string]any); ok {
		m[keys[len(keys)-1]] = v
	}
}

func sampleNames(kind string) []string {
	entries, _ := samples.ReadDir(path.Join("samples", kind))
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

func listSamples(env *Env) int {
	var kinds []string
	for _, k := range senderkind.Builtin().Kinds() {
		if k.Sample != "" {
			kinds = append(kinds, k.Name)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		var names []string
		for _, n := range sampleNames(k) {
			if n == defaultSample(k) {
				n += " (default)"
			}
			names = append(names, n)
		}
		note := ""
		if k == senderkind.HubSpot {
			note = "  [a batch, signed as the source's pinned version: v1, v2 or v3]"
		}
		fmt.Fprintf(env.Stdout, "%-18s %s%s\n", k, strings.Join(names, ", "), note)
	}
	return exitOK
}
