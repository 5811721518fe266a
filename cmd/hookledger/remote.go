package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// adminTokenVar is where --server takes the admin token from. A flag would
// put the token in the process list and the shell history.
const adminTokenVar = "HOOKLEDGER_ADMIN_TOKEN"

// serverFlagUsage is the help text of every verb's --server flag.
const serverFlagUsage = "talk to a running server at `URL` (such as http://127.0.0.1:8080) through the admin API " +
	"instead of opening the store; the token is read from $" + adminTokenVar + ", else from the config's admin.token"

// remote calls a running hookledger's admin API.
type remote struct {
	verb   string
	base   *url.URL
	token  string
	client *http.Client
}

// newRemote builds the client for verb. server is the --server value;
// empty means the server of the config file (its listen address). The
// token comes from $HOOKLEDGER_ADMIN_TOKEN, else from the config's
// admin.token (loaded without the other secrets). cfgExplicit says the
// user named the config file, so a missing one is an error.
func newRemote(env *Env, verb, server, cfgPath string, cfgExplicit bool) (*remote, int) {
	token := ""
	if env.LookupEnv != nil {
		token, _ = env.LookupEnv(adminTokenVar)
	}
	var cfg *config.Config
	if token == "" || server == "" {
		if _, err := os.Stat(cfgPath); err == nil || cfgExplicit {
			var code int
			if cfg, code = loadOperatorConfig(env, verb, cfgPath); cfg == nil {
				return nil, code
			}
		}
	}
	if token == "" && cfg != nil {
		token = cfg.Admin.Token
	}
	if server == "" {
		if cfg == nil {
			fmt.Fprintf(env.Stderr, "hookledger %s: no --server given and no config file %s to take the listen address from\n", verb, cfgPath)
			return nil, exitUsage
		}
		server = "http://" + dialable(cfg.Listen)
	}
	if token == "" {
		fmt.Fprintf(env.Stderr, "hookledger %s: no admin token: set %s to the server's admin.token\n", verb, adminTokenVar)
		return nil, exitUsage
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		fmt.Fprintf(env.Stderr, "hookledger %s: --server %q: want a URL such as http://127.0.0.1:8080 (no credentials, no query)\n", verb, server)
		return nil, exitUsage
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &remote{verb: verb, base: u, token: token, client: &http.Client{
		Transport: env.Transport,
		// The admin API never redirects; following one could hand the
		// token to another host.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, exitOK
}

// apiError is an answer other than 2xx, with the server's own message.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string {
	if e.status == http.StatusUnauthorized {
		return fmt.Sprintf("the server refused the admin token (401: %s): %s must equal its admin.token", e.msg, adminTokenVar)
	}
	return fmt.Sprintf("the server answered %d: %s", e.status, e.msg)
}

// remoteExit maps a failed call onto an exit code: the server's 400 names
// a parameter or value it does not accept, a usage error; anything else is
// a failure.
func remoteExit(err error) int {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
		return exitUsage
	}
	return exitFail
}

// call sends one request and decodes a 2xx JSON answer into out.
func (r *remote) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	u := *r.base
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot reach %s: %w (is 'hookledger serve' running there?)", r.base.Redacted(), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, u.Path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
			if len(e.Error) > 300 {
				e.Error = e.Error[:300] + "..."
			}
		}
		return &apiError{status: resp.StatusCode, msg: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the expected JSON: %w", method, u.Path, err)
	}
	return nil
}

// serverFlagSet reports whether the named flag was given on the command
// line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}

// remoteEffects is the effect ledger of a running server, behind the same
// interface as the store, so that effects prints the same text and JSON
// either way.
type remoteEffects struct {
	r *remote
	// attempts keeps the attempts that came with the last effect read:
	// GET /api/v1/effects/{id} answers both at once.
	attemptsOf int64
	attempts   []*store.Attempt
	// keys holds the idempotency_key of each effect the server answered
	// with, by id.
	keys map[int64]string
}

func (r *remote) effects() *remoteEffects { return &remoteEffects{r: r, keys: map[int64]string{}} }

// effect reads an effect of the server's answer, keeping its idempotency
// key for idempotencyKey.
func (re *remoteEffects) effect(j api.EffectJSON) *store.Effect {
	re.keys[j.ID] = j.IdempotencyKey
	return effectFromJSON(j)
}

// idempotencyKey is the key the server named for e.
func (re *remoteEffects) idempotencyKey(e *store.Effect) string { return re.keys[e.ID] }

func (re *remoteEffects) EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error) {
	var out struct {
		Effects []api.EffectJSON `json:"effects"`
	}
	if err := re.r.call(ctx, http.MethodGet, "/api/v1/effects", effectQuery(p), nil, &out); err != nil {
		return nil, err
	}
	list := make([]*store.Effect, 0, len(out.Effects))
	for _, e := range out.Effects {
		list = append(list, re.effect(e))
	}
	return list, nil
}

// effectQuery writes a list's filter as the query of GET /api/v1/effects,
// which reads it back with api.EffectFilter.
func effectQuery(p *store.EffectListParams) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("flow", p.Flow)
	set("entity", p.Entity)
	set("destination", p.Destination)
	set("owner", p.Owner)
	set("class", string(p.Class))
	if p.DeadlineMissed {
		q.Set("deadline_missed", "true")
	}
	if p.Compensations {
		q.Set("compensations", "true")
	}
	states := p.StateSet()
	if len(states) == 0 {
		q.Set("state", api.StateAny)
	} else {
		names := make([]string, len(states))
		for i, s := range states {
			names[i] = string(s)
		}
		q.Set("state", strings.Join(names, ","))
	}
	for k, t := range map[string]time.Time{"created_from": p.CreatedFrom, "created_to": p.CreatedTo,
		"updated_from": p.UpdatedFrom, "updated_to": p.UpdatedTo} {
		if !t.IsZero() {
			q.Set(k, t.UTC().Format(time.RFC3339Nano))
		}
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(min(p.Limit, api.MaxLimit)))
	}
	if p.AfterID > 0 {
		q.Set("cursor", api.EncodeCursor(p.AfterID))
	}
	return q
}

func (re *remoteEffects) EffectGet(ctx context.Context, id int64) (*store.Effect, error) {
	var out struct {
		Effect   api.EffectJSON    `json:"effect"`
		Attempts []api.AttemptJSON `json:"attempts"`
	}
	err := re.r.call(ctx, http.MethodGet, "/api/v1/effects/"+strconv.FormatInt(id, 10), nil, nil, &out)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	re.attemptsOf, re.attempts = id, nil
	for _, a := range out.Attempts {
		re.attempts = append(re.attempts, attemptFromJSON(id, a))
	}
	return re.effect(out.Effect), nil
}

func (re *remoteEffects) AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error) {
	if re.attemptsOf != effectID {
		if _, err := re.EffectGet(ctx, effectID); err != nil {
			return nil, err
		}
	}
	return re.attempts, nil
}

func (re *remoteEffects) EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error) {
	// The API records the actor as operator:NAME itself.
	in := map[string]string{"note": p.Note, "owner": p.Owner, "actor": strings.TrimPrefix(p.Actor, "operator:")}
	var out struct {
		Effect api.EffectJSON `json:"effect"`
	}
	path := "/api/v1/effects/" + strconv.FormatInt(p.EffectID, 10) + "/" + url.PathEscape(p.Action)
	if err := re.r.call(ctx, http.MethodPost, path, nil, in, &out); err != nil {
		return nil, err
	}
	return re.effect(out.Effect), nil
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func effectFromJSON(j api.EffectJSON) *store.Effect {
	return &store.Effect{
		ID: j.ID, EpisodeKey: j.EpisodeKey, Flow: j.Flow, Entity: j.Entity, Version: j.Version, Effect: j.Effect,
		Destination: j.Destination, State: store.EffectState(j.State), Source: j.Source, SourceEventID: j.SourceEventID,
		CausationID: j.CausationID, Hop: j.Hop, Attempts: j.Attempts, CreatedAt: parseTime(j.CreatedAt), UpdatedAt: parseTime(j.UpdatedAt),
		NextAttemptAt: parseTime(j.NextAttemptAt), Redrives: j.Redrives, ErrorClass: store.ErrorClass(j.ErrorClass),
		Reason: j.Reason, SuggestedRepair: j.SuggestedRepair, DestinationRef: j.DestinationRef, LastResponse: j.LastResponse,
		Owner: j.Owner, Note: j.Note, Compensates: j.Compensates, Request: j.Request,
	}
}

func attemptFromJSON(effectID int64, a api.AttemptJSON) *store.Attempt {
	return &store.Attempt{
		EffectID: effectID, Number: a.Number, StartedAt: parseTime(a.StartedAt), Duration: time.Duration(a.DurationMS) * time.Millisecond,
		Status: a.Status, Class: store.ErrorClass(a.Class), Error: a.Error, Response: a.Response, RetryAfter: a.RetryAfter,
		RetryAfterUnit: a.RetryAfterUnit, Wait: time.Duration(a.WaitMS) * time.Millisecond, Reconcile: a.Reconcile, Restart: a.Restart,
	}
}

// openEffects returns the effect ledger effects works on: a running
// server's with --server, else the configured store, opened without
// migrating and without the config's secrets (read-only for list and show).
func openEffects(ctx context.Context, env *Env, fs *flag.FlagSet, server, cfgPath string, access storeAccess) (effectsStore, func(), int) {
	if server != "" {
		r, code := newRemote(env, "effects", server, cfgPath, flagGiven(fs, "config"))
		if r == nil {
			return nil, nil, code
		}
		return r.effects(), func() {}, exitOK
	}
	cfg, code := loadOperatorConfig(env, "effects", cfgPath)
	if cfg == nil {
		return nil, nil, code
	}
	st, code := openOperatorStore(ctx, env, "effects", cfg, access)
	if st == nil {
		return nil, nil, code
	}
	return &localEffects{Store: st, cfg: cfg}, func() { st.Close() }, exitOK
}
