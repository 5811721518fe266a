package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

var validateCommand = &command{
	name:    "validate",
	summary: "check stored effect requests against the vendor's validation endpoint",
	run:     runValidate,
}

const validateUsage = `validate [--config FILE] [--format text|json] ID...`

const validateDescription = `Sends the stored request of each effect to its destination's validation
endpoint instead of the live one, and prints what the validation server
says. The ga4-mp preset has one: GA4's Measurement Protocol answers 2xx
even for a malformed event, so its failures are visible only there
(/debug/mp/collect). The vendor records nothing, and the effects are not
changed, whatever their state. The verb needs the destination's
credentials (the config's secrets), and it never creates or migrates the
store.

Exit 0 when every request is valid, 1 when any has validation messages or
could not be checked, 2 for bad arguments or a destination without a
validation endpoint.`

// validateStore is what the verb needs from the store.
type validateStore interface {
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
}

// validateResult is one effect's outcome, in JSON.
type validateResult struct {
	EffectID    int64                       `json:"effect_id"`
	EpisodeKey  string                      `json:"episode_key"`
	Destination string                      `json:"destination"`
	Valid       bool                        `json:"valid"`
	Messages    []deliver.ValidationMessage `json:"messages"`
	Error       string                      `json:"error,omitempty"`
}

func runValidate(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "validate", validateUsage, validateDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	format := fs.String("format", "text", "output `format`: text or json")
	args, code, ok := parseInterspersed(env, fs, args)
	if !ok {
		return code
	}
	if code, ok := checkArgs(env, "validate", nil, format); !ok {
		return code
	}
	if len(args) == 0 {
		fmt.Fprintf(env.Stderr, "hookledger validate: expected one or more effect IDs\nUsage: hookledger %s\n", validateUsage)
		return exitUsage
	}
	ids := make([]int64, len(args))
	for i, a := range args {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintf(env.Stderr, "hookledger validate: %q is not an effect ID (a positive number)\n", a)
			return exitUsage
		}
		ids[i] = n
	}
	cfg, code := loadConfig(env, "validate", *cfgPath)
	if cfg == nil {
		return code
	}
	// It reads the ledger as the operator verbs do: a store that serve or
	// migrate has not prepared is refused, never created or migrated.
	opened, code := openOperatorStore(ctx, env, "validate", cfg, readStore)
	if opened == nil {
		return code
	}
	defer opened.Close()
	var st validateStore = opened

	// Read every effect and its destination before sending anything, so
	// that a bad ID or an effect that cannot be validated stops the verb
	// with nothing half done.
	effects := make([]*store.Effect, len(ids))
	dests := make([]*config.Destination, len(ids))
	for i, id := range ids {
		e, err := st.EffectGet(ctx, id)
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger validate: %v\n", err)
			return exitFail
		}
		if e == nil {
			fmt.Fprintf(env.Stderr, "hookledger validate: no effect %d\n", id)
			return exitFail
		}
		d := destinationNamed(cfg, e.Destination)
		switch {
		case d == nil:
			fmt.Fprintf(env.Stderr, "hookledger validate: effect %d: destination %q is not in %s\n", id, e.Destination, *cfgPath)
			return exitUsage
		case d.PresetData == nil || d.PresetData.Validation == nil:
			fmt.Fprintf(env.Stderr, "hookledger validate: effect %d: destination %s (preset %s) has no validation endpoint\n", id, d.Name, d.Preset)
			return exitUsage
		}
		effects[i], dests[i] = e, d
	}

	client := &http.Client{} // each call is bounded by its destination's timeout
	results := make([]validateResult, 0, len(ids))
	code = exitOK
	for i, e := range effects {
		r := validateResult{EffectID: e.ID, EpisodeKey: e.EpisodeKey, Destination: e.Destination, Messages: []deliver.ValidationMessage{}}
		v, err := deliver.Validate(ctx, client, dests[i], e)
		switch {
		case errors.Is(err, context.Canceled):
			fmt.Fprintf(env.Stderr, "hookledger validate: %v\n", err)
			return exitFail
		case err != nil:
			r.Error = err.Error()
			code = exitFail
		default:
			r.Messages, r.Valid = v.Messages, len(v.Messages) == 0
			if !r.Valid {
				code = exitFail
			}
		}
		results = append(results, r)
	}
	if *format == "json" {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Results []validateResult `json:"results"`
		}{results}); err != nil {
			fmt.Fprintf(env.Stderr, "hookledger validate: %v\n", err)
			return exitFail
		}
		return code
	}
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "effect %d  %s  (%s): ", r.EffectID, r.EpisodeKey, r.Destination)
		switch {
		case r.Error != "":
			fmt.Fprintf(&b, "not checked: %s\n", r.Error)
		case r.Valid:
			b.WriteString("valid\n")
		default:
			fmt.Fprintf(&b, "%d validation message(s)\n", len(r.Messages))
			for _, m := range r.Messages {
				fmt.Fprintf(&b, "  %s: %s (%s)\n", oneLine(m.FieldPath), oneLine(m.Description), oneLine(m.ValidationCode))
			}
		}
	}
	if _, err := fmt.Fprint(env.Stdout, b.String()); err != nil {
		return exitFail
	}
	return code
}

// oneLine keeps a vendor's text from starting lines of its own on the
// terminal.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

func destinationNamed(cfg *config.Config, name string) *config.Destination {
	for i := range cfg.Destinations {
		if cfg.Destinations[i].Name == name {
			return &cfg.Destinations[i]
		}
	}
	return nil
}
