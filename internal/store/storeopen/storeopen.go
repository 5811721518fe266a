// Package storeopen is the one place that knows the store drivers: which
// store URL names which driver, how to open it, what its URL must hold
// (config validation) and how many group commits the inbox writer runs on
// it. Callers need neither import both drivers nor parse a store URL's
// scheme.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/postgres"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// Driver describes one store driver.
type Driver struct {
	// Name names the driver in logs and benchmark tables.
	Name string
	// Schemes are the prefixes of the store URLs that choose this driver.
	Schemes []string
	// Form is how a store URL for this driver is written, for the message
	// that answers a URL no driver takes.
	Form string
	// Flushers is how many group commits the inbox writer runs at once on
	// this driver (inbox.Options.Flushers).
	Flushers int

	// check reports what is wrong with a URL of this driver beyond its
	// scheme (nil: anything goes).
	check func(url string) error
	open  func(ctx context.Context, url string) (store.Store, error)
}

// drivers is the table: the order is the order of the forms in messages.
var drivers = []*Driver{
	{
		Name:    "sqlite",
		Schemes: []string{"sqlite:"},
		Form:    "sqlite:PATH",
		// SQLite has one writer: a second group commit would only wait
		// for the first one's lock.
		Flushers: 1,
		check: func(url string) error {
			if strings.TrimPrefix(url, "sqlite:") == "" {
				return errors.New("sqlite: needs a file path, for example sqlite:./data/hookledger.db")
			}
			return nil
		},
		open: func(ctx context.Context, url string) (store.Store, error) {
			st, err := sqlite.Open(ctx, strings.TrimPrefix(url, "sqlite:"))
			if err != nil {
				return nil, err
			}
			return st, nil
		},
	},
	{
		Name:    "postgres",
		Schemes: []string{"postgres://", "postgresql://"},
		Form:    "postgres://user@host:port/db",
		// A group costs one statement per table whatever its size, so
		// fewer, larger groups cost the database less: with two, one
		// group's commit overlaps the next one's gathering, and at 32
		// concurrent senders on two cores p99 fell from 28–32 ms with four
		// flushers to 20–24 ms (docs/benchmarks-history.md, "One statement
		// per table, statistics that keep up").
		Flushers: 2,
		open: func(ctx context.Context, url string) (store.Store, error) {
			st, err := postgres.Open(ctx, url, 0)
			if err != nil {
				return nil, err
			}
			return st, nil
		},
	},
}

// For returns the driver a store URL chooses by its scheme. Its error
// names the forms the drivers take, with the URL's password hidden.
func For(url string) (*Driver, error) {
	forms := make([]string, 0, len(drivers))
	for _, d := range drivers {
		for _, s := range d.Schemes {
			if strings.HasPrefix(url, s) {
				return d, nil
			}
		}
		forms = append(forms, d.Form)
	}
	return nil, fmt.Errorf("%q is not supported: use %s", Redact(url), strings.Join(forms, " or "))
}

// Check reports what is wrong with a store URL, for config validation:
// a scheme no driver takes, or what its driver needs beyond the scheme.
func Check(url string) error {
	d, err := For(url)
	if err != nil {
		return err
	}
	if d.check != nil {
		return d.check(url)
	}
	return nil
}

// Open opens the store a URL names: "sqlite:PATH" or a "postgres://" /
// "postgresql://" URL.
func Open(ctx context.Context, url string) (store.Store, error) {
	d, err := For(url)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return d.Open(ctx, url)
}

// Open opens a store URL that chose d.
func (d *Driver) Open(ctx context.Context, url string) (store.Store, error) {
	return d.open(ctx, url)
}

// Redact hides the password of a postgres URL for logs and messages.
func Redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return url
	}
	user, _, hasPw := strings.Cut(rest[:at], ":")
	if !hasPw {
		return url
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
