package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

var exceptionsCommand = &command{
	name:    "exceptions",
	summary: "list what waits for a person: dead effects and dead-lettered events",
	run:     runExceptions,
}

const exceptionsUsage = `exceptions [--config FILE | --server URL] [--kind effect|event] [--limit N] [--cursor C]
                  [--format text|json]`

const exceptionsDescription = `Lists the exception queue of the configured store, or of a running server
with --server (GET /api/v1/exceptions): the effects in state dead or
needs_reconciliation, oldest first, then the dead-lettered events, each
with why it waits, the suggested repair, its owner and its age.

The owner is the one assigned to an effect (hookledger effects assign),
else the owner: of its destination in the config; an event's is the
owner: of each flow that dead-lettered it. The age counts from an
effect's last change and from an event's first receipt.

Repair an effect with hookledger effects retry|resolve|assign ID, an
event with hookledger replay (once the flow's configuration is
corrected) or hookledger events resolve. At most --limit entries are
listed (1 to 1000); when there are more, a last line on stderr gives the
--cursor for the next page.`

// exceptionLister is what the verb reads: the store, or a running
// server's admin API.
type exceptionLister interface {
	exceptions(ctx context.Context, p *store.ExceptionListParams) (api.ExceptionListJSON, error)
}

func runExceptions(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "exceptions", exceptionsUsage, exceptionsDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	format := fs.String("format", "text", "output `format`: text or json")
	kind := fs.String("kind", "", "only this `kind`: effect or event")
	limit := fs.Int("limit", api.DefaultLimit, fmt.Sprintf("at most `N` entries (1 to %d)", api.MaxLimit))
	cursor := fs.String("cursor", "", "the `cursor` printed by the previous page")
	server := fs.String("server", "", serverFlagUsage)
	extra, code, ok := parseInterspersed(env, fs, args)
	if !ok {
		return code
	}
	if code, ok := checkArgs(env, "exceptions", extra, format); !ok {
		return code
	}
	// The flags are the API's query parameters, read by the same code.
	p, err := api.ExceptionFilter(url.Values{"kind": {*kind}, "limit": {strconv.Itoa(*limit)}, "cursor": {*cursor}})
	var pe *api.ParamError
	if errors.As(err, &pe) {
		fmt.Fprintf(env.Stderr, "hookledger exceptions: --%s: %s\n", pe.Param, safe(pe.Msg))
		return exitUsage
	}
	st, closeStore, code := openExceptions(ctx, env, fs, *server, *cfgPath)
	if st == nil {
		return code
	}
	defer closeStore()
	out, err := st.exceptions(ctx, p)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger exceptions: %s\n", safe(err.Error()))
		return remoteExit(err)
	}
	if *format == "json" {
		return writeJSONOut(env.Stdout, out)
	}
	writeExceptions(env, out)
	return exitOK
}

// writeExceptions prints one block per entry: what it is, its state, age
// and owner, then why it waits and what to do.
func writeExceptions(env *Env, out api.ExceptionListJSON) {
	w := env.Stdout
	for _, x := range out.Exceptions {
		what := "effect " + x.ID + "  " + safe(x.EpisodeKey) + "  -> " + safe(x.Destination)
		if x.Kind == store.ExceptionEvent {
			what = "event " + safe(x.Source) + "/" + safe(x.ID) + "  " + safe(x.Type)
		}
		fmt.Fprintf(w, "%s\n  state   %s\n  age     %s\n  owner   %s\n  reason  %s\n  repair  %s\n",
			what, safe(x.State), time.Duration(x.AgeSeconds)*time.Second, dash(x.Owner), dash(x.Reason), dash(x.Repair))
	}
	if len(out.Exceptions) == 0 {
		fmt.Fprintln(w, "(no exceptions)")
	}
	if out.NextCursor != "" {
		fmt.Fprintf(env.Stderr, "more: run again with --cursor %s\n", out.NextCursor)
	}
}

// openExceptions returns what the verb reads: a running server's admin API
// with --server, else the configured store (with the config's owners),
// opened without migrating and without the config's secrets.
func openExceptions(ctx context.Context, env *Env, fs *flag.FlagSet, server, cfgPath string) (exceptionLister, func(), int) {
	if server != "" {
		r, code := newRemote(env, "exceptions", server, cfgPath, flagGiven(fs, "config"))
		if r == nil {
			return nil, nil, code
		}
		return remoteExceptions{r}, func() {}, exitOK
	}
	cfg, code := loadOperatorConfig(env, "exceptions", cfgPath)
	if cfg == nil {
		return nil, nil, code
	}
	st, code := openOperatorStore(ctx, env, "exceptions", cfg, readStore)
	if st == nil {
		return nil, nil, code
	}
	return localExceptions{st: st, env: env, owners: cfg.Owners()}, func() { st.Close() }, exitOK
}

// localExceptions reads the queue from the configured store.
type localExceptions struct {
	st     store.Store
	env    *Env
	owners store.Owners
}

func (l localExceptions) exceptions(ctx context.Context, p *store.ExceptionListParams) (api.ExceptionListJSON, error) {
	p.Owners = l.owners
	res, err := store.ExceptionList(ctx, l.st, p)
	if err != nil {
		return api.ExceptionListJSON{}, err
	}
	return api.NewExceptionListJSON(res, storeNow(ctx, l.env, l.st)), nil
}

// remoteExceptions reads the queue from a running server.
type remoteExceptions struct{ r *remote }

func (re remoteExceptions) exceptions(ctx context.Context, p *store.ExceptionListParams) (api.ExceptionListJSON, error) {
	q := url.Values{"limit": {strconv.Itoa(p.Limit)}}
	if p.Kind != "" {
		q.Set("kind", p.Kind)
	}
	if p.AfterKind != "" {
		q.Set("cursor", api.EncodeExceptionCursor(p.AfterKind, p.AfterID))
	}
	var out api.ExceptionListJSON
	err := re.r.call(ctx, "GET", "/api/v1/exceptions", q, nil, &out)
	return out, err
}
