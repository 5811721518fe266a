package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"github.com/hookledger/hookledger/internal/authlimit"
)

// Bearer admits the requests that carry admin.token as a bearer token. It
// logs every other request (client address, method and path, never the
// token or any part of it) and counts it against the client's address;
// an address that has sent too many wrong tokens is answered 429 with
// Retry-After before its token is looked at, so the right token gets the
// same answer and the lock tells a guesser nothing. The admin API is
// behind one, and /metrics with metrics.auth: token.
type Bearer struct {
	tokenHash [32]byte
	enabled   bool
	guard     *authlimit.Limiter
	log       *slog.Logger
	// what names the guarded resource in the log ("admin API").
	what string
}

// NewBearer admits token; an empty token admits nothing (and counts
// nothing: there is nothing to guess).
func NewBearer(token string, guard *authlimit.Limiter, log *slog.Logger, what string) *Bearer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Comparing fixed-size hashes keeps the comparison constant-time
	// whatever the length of the presented token.
	return &Bearer{tokenHash: sha256.Sum256([]byte(token)), enabled: token != "", guard: guard, log: log, what: what}
}

// Wrap puts next behind the token.
func (b *Bearer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.Admit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// Admit reports whether r carries the token; when it does not, Admit has
// answered it (401, or 429 for a locked-out address).
func (b *Bearer) Admit(w http.ResponseWriter, r *http.Request) bool {
	client := b.guard.Client(r)
	if wait := b.guard.Wait(client); wait > 0 {
		w.Header().Set("Retry-After", authlimit.RetryAfter(wait))
		writeError(w, http.StatusTooManyRequests, "too many wrong bearer tokens from this address: retry after "+
			authlimit.RetryAfter(wait)+" s")
		return false
	}
	if b.authorized(r) {
		return true
	}
	if b.enabled {
		b.refused(r, client)
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="hookledger"`)
	writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (admin.token)")
	return false
}

// refused logs a missing or wrong token and counts it against the client;
// the lock-out is logged once, when it begins, not with every 429 after.
func (b *Bearer) refused(r *http.Request, client string) {
	b.log.Warn(b.what+": refused a missing or wrong bearer token", "client", client, "method", r.Method, "path", r.URL.Path)
	if lock := b.guard.Fail(client); lock > 0 {
		b.log.Warn(b.what+": too many wrong bearer tokens: address locked out", "client", client,
			"tries", b.guard.Tries(), "locked_for", lock)
	}
}

func (b *Bearer) authorized(r *http.Request) bool {
	if !b.enabled {
		return false
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], b.tokenHash[:]) == 1
}
