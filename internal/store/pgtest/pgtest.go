// Package pgtest gives tests a fresh PostgreSQL database on the server named
// by HOOKLEDGER_TEST_POSTGRES (the test script starts a throwaway server and
// sets it). Without it the test skips loudly, except under CI where a
// missing server is a failure: PostgreSQL tests must run there (package
// testdep).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/testdep"
)

// EnvVar names the admin connection URL of the test server.
const EnvVar = "HOOKLEDGER_TEST_POSTGRES"

// ServerURL returns the admin URL, skipping (or failing under CI) when unset.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		testdep.Missing(t, "no PostgreSQL server: %s is not set; `make test` starts a throwaway one (it needs Debian's postgresql package)", EnvVar)
	}
	return u
}

// NewDatabase creates an empty database for this test, drops it at cleanup
// and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return NewDatabaseWith(t, "")
}

// NewDatabaseWith is NewDatabase with options for CREATE DATABASE, such as
// a template and a locale: "TEMPLATE template0 LOCALE_PROVIDER icu
// ICU_LOCALE 'en-US'".
func NewDatabaseWith(t testing.TB, options string) string {
	t.Helper()
	admin := ServerURL(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "hl_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name+" "+options); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		// The context's end sends a cancel request, which a server busy
		// with the drop may never answer: a run once waited 23 minutes
		// here. A deadline on the socket ends the wait whatever the
		// server does; a database left behind is only disk.
		_ = c.PgConn().Conn().SetDeadline(time.Now().Add(45 * time.Second))
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvVar, err)
	}
	u.Path = "/" + name
	return u.String()
}
