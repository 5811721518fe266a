package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// cellStore is a fresh, empty database for one benchmark cell, so that no
// cell pays for the rows of the one before it.
type cellStore struct {
	driver string
	// URL is the store URL as the config file writes it.
	URL string
	// drop removes the database (PostgreSQL); nil for SQLite, whose file
	// goes with the temp dir.
	drop func(context.Context) error
}

// newCellStore makes a new SQLite file under dir, or a new database on the
// PostgreSQL server named by adminURL.
func newCellStore(ctx context.Context, driver, dir, adminURL, label string) (*cellStore, error) {
	switch driver {
	case "sqlite":
		return &cellStore{driver: driver, URL: "sqlite:" + filepath.Join(dir, label+".db")}, nil
	case "postgres":
		return newPostgresDatabase(ctx, adminURL)
	}
	return nil, fmt.Errorf("unknown driver %q", driver)
}

func newPostgresDatabase(ctx context.Context, adminURL string) (*cellStore, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("name database: %w", err)
	}
	name := "hl_bench_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, singleConnURL(adminURL))
	if err != nil {
		return nil, fmt.Errorf("connect to postgres admin URL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parse postgres admin URL: %w", err)
	}
	u.Path = "/" + name
	drop := func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, singleConnURL(adminURL))
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return &cellStore{driver: "postgres", URL: u.String(), drop: drop}, nil
}

// Drop removes the database; it runs on a fresh context so that an
// interrupted run still cleans up.
func (c *cellStore) Drop() error {
	if c.drop == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.drop(ctx)
}

// storedEvents pages through EventList and returns the deliveries stored
// per event id of source. Reading through the store contract (not SQL of
// our own) means the check sees exactly what the product would serve.
func storedEvents(ctx context.Context, st store.Store, source string) (map[string]int, error) {
	out := map[string]int{}
	var after int64
	for {
		page, err := st.EventList(ctx, &store.EventListParams{Source: source, AfterPK: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("list stored events: %w", err)
		}
		for _, e := range page.Events {
			out[e.EventID] += e.Deliveries
		}
		if page.NextAfterPK == 0 {
			return out, nil
		}
		if page.NextAfterPK <= after {
			return nil, errors.New("list stored events: cursor did not advance")
		}
		after = page.NextAfterPK
	}
}

// singleConnURL drops the pool settings (pool_max_conns and the like) from
// a store URL: they configure the server's pool, and a single connection
// would send them to PostgreSQL as unknown settings.
func singleConnURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// sqliteSeries is a FROM item of SQLite that yields the rows i = 1..n,
// for the fixtures that plant rows with one INSERT ... SELECT per table.
func sqliteSeries(n int) string {
	return fmt.Sprintf("(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i FROM s) AS g", n)
}

// postgresSeries is sqliteSeries for PostgreSQL.
func postgresSeries(n int) string {
	return fmt.Sprintf("generate_series(1::bigint, %d) AS g(i)", n)
}
