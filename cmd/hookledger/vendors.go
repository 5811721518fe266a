package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/vendors"
)

var vendorsCommand = &command{
	name:    "vendors",
	summary: "print the vendor delivery contracts the linter knows",
	run:     runVendors,
}

const vendorsDescription = `Prints the delivery contracts of the vendors in the catalogue: retry,
manual resend and replay windows, acknowledgement timeouts, Retry-After units,
deduplication and idempotency-key windows, each with the date it was read.
With NAMEs (a vendor's name or alias, in any case), only those vendors.
The names are what the inventory's sources column accepts. Vendors change
their contracts: confirm a figure against the live documentation before
relying on it.`

func runVendors(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "vendors", "vendors [--format text|json] [NAME...]", vendorsDescription)
	format := fs.String("format", "text", "output `format`: text or json")
	names, code, ok := parseInterspersed(env, fs, args)
	if !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(env.Stderr, "hookledger vendors: --format: unknown format %q, expected text or json\n", *format)
		return exitUsage
	}
	// The catalogue and the contracts the sender kinds declare themselves.
	kinds := senderkind.Builtin()
	cat := kinds.Catalogue()
	if len(names) > 0 {
		var unknown []string
		cat, unknown = pickVendors(kinds.Index(), names)
		if len(unknown) > 0 {
			what := "vendor"
			if len(unknown) > 1 {
				what = "vendors"
			}
			fmt.Fprintf(env.Stderr, "hookledger vendors: unknown %s %s; known vendors: %s\n",
				what, strings.Join(unknown, ", "), strings.Join(kinds.VendorNames(), ", "))
			return exitUsage
		}
	}
	var err error
	if *format == "json" {
		err = writeVendorsJSON(env.Stdout, cat)
	} else {
		err = writeVendorsText(env.Stdout, cat)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger vendors: %v\n", err)
		return exitFail
	}
	return exitOK
}

// pickVendors looks names up by name or alias, in the order given and each
// contract once, and returns the names it does not know, quoted.
func pickVendors(ix vendors.Index, names []string) (picked []vendors.Contract, unknown []string) {
	seen := map[string]bool{}
	for _, n := range names {
		c, ok := ix.Lookup(n)
		switch {
		case !ok:
			unknown = append(unknown, strconv.Quote(n))
		case !seen[c.Name]:
			seen[c.Name] = true
			picked = append(picked, c)
		}
	}
	return picked, unknown
}

// vendorJSON is the JSON form of a contract. Durations are whole seconds
// with the unit in the field name, and omitted when the vendor does not
// state them.
type vendorJSON struct {
	Name                        string   `json:"name"`
	Aliases                     []string `json:"aliases,omitempty"`
	Title                       string   `json:"title"`
	Kind                        string   `json:"kind"`
	Source                      string   `json:"source"`
	Read                        string   `json:"read"`
	RetryWindowSeconds          int64    `json:"retry_window_seconds,omitempty"`
	Retries                     int      `json:"retries,omitempty"`
	RetryScheduleSeconds        []int64  `json:"retry_schedule_seconds,omitempty"`
	ManualResendWindowSeconds   int64    `json:"manual_resend_window_seconds,omitempty"`
	ReplayWindowSeconds         int64    `json:"replay_window_seconds,omitempty"`
	AckTimeoutSeconds           int64    `json:"ack_timeout_seconds,omitempty"`
	SignatureToleranceSeconds   int64    `json:"signature_tolerance_seconds,omitempty"`
	RetryAfterHonoured          string   `json:"retry_after_honoured,omitempty"`
	RetryAfterSent              string   `json:"retry_after_sent,omitempty"`
	DedupeKey                   string   `json:"dedupe_key,omitempty"`
	DedupeWindowSeconds         int64    `json:"dedupe_window_seconds,omitempty"`
	IdempotencyKeyWindowSeconds int64    `json:"idempotency_key_window_seconds,omitempty"`
	Notes                       []string `json:"notes,omitempty"`
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

func writeVendorsJSON(w io.Writer, cat []vendors.Contract) error {
	out := struct {
		Vendors []vendorJSON `json:"vendors"`
	}{Vendors: make([]vendorJSON, 0, len(cat))}
	for _, c := range cat {
		v := vendorJSON{
			Name: c.Name, Aliases: c.Aliases, Title: c.Title, Kind: string(c.Kind), Source: c.Source, Read: c.Read,
			RetryWindowSeconds:          seconds(c.RetryWindow),
			Retries:                     c.Retries,
			ManualResendWindowSeconds:   seconds(c.ManualResendWindow),
			ReplayWindowSeconds:         seconds(c.ReplayWindow),
			AckTimeoutSeconds:           seconds(c.AckTimeout),
			SignatureToleranceSeconds:   seconds(c.SignatureTolerance),
			RetryAfterHonoured:          string(c.RetryAfterHonoured),
			RetryAfterSent:              string(c.RetryAfterSent),
			DedupeKey:                   c.DedupeKey,
			DedupeWindowSeconds:         seconds(c.DedupeWindow),
			IdempotencyKeyWindowSeconds: seconds(c.IdempotencyKeyWindow),
			Notes:                       c.Notes,
		}
		for _, d := range c.RetrySchedule {
			v.RetryScheduleSeconds = append(v.RetryScheduleSeconds, seconds(d))
		}
		out.Vendors = append(out.Vendors, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write vendors: %w", err)
	}
	return nil
}

func writeVendorsText(w io.Writer, cat []vendors.Contract) error {
	bw := bufio.NewWriter(w)
	for i, c := range cat {
		if i > 0 {
			bw.WriteString("\n")
		}
		fmt.Fprintf(bw, "%s: %s (%s)\n", safe(c.Name), safe(c.Title), safe(string(c.Kind)))
		fmt.Fprintf(bw, "  read %s from %s\n", safe(c.Read), safe(c.Source))
		field := func(label, value string) {
			if value != "" {
				fmt.Fprintf(bw, "  %-22s %s\n", label, safe(value))
			}
		}
		field("also written", strings.Join(c.Aliases, ", "))
		retry := human(c.RetryWindow)
		if c.Retries > 0 {
			retry = strings.TrimSpace(retry + ", " + strconv.Itoa(c.Retries) + " retries")
			retry = strings.TrimPrefix(retry, ", ")
		}
		field("retry window", retry)
		if len(c.RetrySchedule) > 0 {
			steps := make([]string, len(c.RetrySchedule))
			for i, d := range c.RetrySchedule {
				steps[i] = human(d)
			}
			field("retries after", strings.Join(steps, ", "))
		}
		field("manual resend window", human(c.ManualResendWindow))
		field("replay window", human(c.ReplayWindow))
		field("ack timeout", human(c.AckTimeout))
		field("signature tolerance", human(c.SignatureTolerance))
		field("Retry-After honoured", string(c.RetryAfterHonoured))
		field("Retry-After sent", string(c.RetryAfterSent))
		dedupe := c.DedupeKey
		if c.DedupeWindow > 0 {
			dedupe += " for " + human(c.DedupeWindow)
		}
		field("dedupe", dedupe)
		field("idempotency key window", human(c.IdempotencyKeyWindow))
		for _, n := range c.Notes {
			fmt.Fprintf(bw, "  - %s\n", safe(n))
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write vendors: %w", err)
	}
	return nil
}

// human writes a duration the way vendors quote it: 3 days, 24 hours,
// 7h51m, 150 s. Zero (not stated) is empty.
func human(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.FormatInt(n, 10) + " " + one + "s"
	}
	switch {
	case d == 0:
		return ""
	case d%vendors.Day == 0 && d > 2*vendors.Day:
		// Vendors quote a day or two in hours (24 hours, 48 hours).
		return unit(int64(d/vendors.Day), "day")
	case d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d < time.Minute || d%time.Minute != 0:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	case d < time.Hour:
		return unit(int64(d/time.Minute), "minute")
	}
	return strings.TrimSuffix(d.String(), "0s")
}
