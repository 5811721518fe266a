// Package storeopen chooses and opens the store driver named by the config's
// store URL, so that callers need not import both drivers.
package storeopen

import (
	"context"
	"fmt"
	"strings"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/postgres"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// Open opens "sqlite:PATH" or a "postgres://" / "postgresql://" URL.
func Open(ctx context.Context, url string) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(url, "sqlite:"))
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url, 0)
	}
	return nil, fmt.Errorf("open store: unsupported store %q: use sqlite:PATH or a postgres:// URL", Redact(url))
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
