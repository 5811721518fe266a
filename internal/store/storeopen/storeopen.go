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
	"path/filepath"
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
	// resolve makes a URL that depends on the current directory
	// independent of it, relative to dir (nil: the URL is absolute).
	resolve func(url, dir string) string
	open    func(ctx context.Context, url string) (store.Store, error)
	// missing returns an error wrapping fs.ErrNotExist when the database
	// a URL names is not there, and nil when it is (nil func: the database
	// server says so itself).
	missing func(url string) error
	// openReadOnly opens an existing database for reading: it creates,
	// migrates and writes nothing, and an error wrapping
	// fs.ErrNotExist says the database is not there.
	openReadOnly func(ctx context.Context, url string) (store.Store, error)
}

// drivers is the table: the order is the order of the forms in messages.
var drivers = []*Driver{
	{
		Name:    "sqlite",
		Schemes: []string{"sqlite:"},
		Form:    "sqlite:PATH",
		// SQLite has one writer, but its transaction is shared: a group
		// handed to it while another group's commit is under way joins
		// that transaction before its commit, or the next one. With one
		// flusher, webhooks that arrive meanwhile wait for the earlier
		// group's commit before they are even handed over, and so wait
		// for a commit more (docs/benchmarks-history.md, "Two inbox
		// flushers on SQLite").
		Flushers: 2, // both hand their groups to the one shared writer
		check: func(url string) error {
			if strings.TrimPrefix(url, "sqlite:") == "" {
				return errors.New("sqlite: needs a file path, for example sqlite:./data/hookledger.db")
			}
			return nil
		},
		// A relative file path would otherwise follow whatever directory
		// the command is started from: a cron job run elsewhere would
		// look for (and be told to create) a different database.
		resolve: func(url, dir string) string {
			path := strings.TrimPrefix(url, "sqlite:")
			if path == "" || path == ":memory:" || filepath.IsAbs(path) {
				return url
			}
			return "sqlite:" + filepath.Join(dir, path)
		},
		open: func(ctx context.Context, url string) (store.Store, error) {
			st, err := sqlite.Open(ctx, strings.TrimPrefix(url, "sqlite:"))
			if err != nil {
				return nil, err
			}
			return st, nil
		},
		missing: func(url string) error {
			return sqlite.Exists(strings.TrimPrefix(url, "sqlite:"))
		},
		openReadOnly: func(ctx context.Context, url string) (store.Store, error) {
			st, err := sqlite.OpenReadOnly(ctx, strings.TrimPrefix(url, "sqlite:"))
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
		// Opening a PostgreSQL store creates nothing: the database must
		// exist, and only migrate and serve create the schema.
		openReadOnly: func(ctx context.Context, url string) (store.Store, error) {
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

// Resolve returns the store URL with a path relative to dir made
// absolute (sqlite:./data/h.db in a config file under /srv/hl is
// sqlite:/srv/hl/data/h.db). dir is made absolute first. A URL no driver
// takes, or one that names no file, is returned as it is, for Check to
// judge.
func Resolve(url, dir string) string {
	d, err := For(url)
	if err != nil || d.resolve == nil {
		return url
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return d.resolve(url, dir)
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

// OpenExisting is Open for a verb that changes an existing store but must
// not create one: an error wrapping fs.ErrNotExist says there is no
// database at the URL.
func OpenExisting(ctx context.Context, url string) (store.Store, error) {
	d, err := For(url)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if d.missing != nil {
		if err := d.missing(url); err != nil {
			return nil, err
		}
	}
	return d.open(ctx, url)
}

// OpenReadOnly opens the existing store a URL names for a verb that only
// reads it: nothing is created, migrated or written, and a database file
// in a read-only directory, or one without write permission, can be read.
// An error wrapping fs.ErrNotExist says there is no database at the URL.
func OpenReadOnly(ctx context.Context, url string) (store.Store, error) {
	d, err := For(url)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return d.openReadOnly(ctx, url)
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
