package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

const (
	// cookieName names the session cookie; its value is the session id.
	cookieName = "hookledger_console"
	// sessionLifetime is fixed from login: an operator logs in again each
	// working day, and a stolen cookie stops working the same day.
	sessionLifetime = 12 * time.Hour
	// onceLifetime bounds a one-time login link that nobody used.
	onceLifetime = 15 * time.Minute
	// maxSessions bounds the session map: past it, logging in evicts the
	// sessions closest to their end, so repeated logins cannot grow memory
	// without bound.
	maxSessions = 1000
	// csrfField and csrfHeader carry the CSRF token of a state change: the
	// field for plain forms, the header for htmx requests.
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// session is one logged-in browser.
type session struct {
	csrf    string
	expires time.Time
}

// sessions is the server-side session map and the unused one-time login
// codes. Keys are SHA-256 hashes of the secrets, so the map never holds a
// cookie value a memory dump could replay as is.
type sessions struct {
	mu   sync.Mutex
	byID map[[32]byte]*session
	once map[[32]byte]time.Time // code hash -> expiry
}

func newSessions() *sessions {
	return &sessions{byID: map[[32]byte]*session{}, once: map[[32]byte]time.Time{}}
}

// randomToken returns 32 random bytes, base64url without padding.
func randomToken() string {
	var b [32]byte
	// crypto/rand.Read never fails on supported platforms (Go 1.24+: it
	// crashes the program rather than return short).
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// create starts a session at now and returns its id and CSRF token.
func (s *sessions) create(now time.Time) (id string, sess *session) {
	id = randomToken()
	sess = &session{csrf: randomToken(), expires: now.Add(sessionLifetime)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	for len(s.byID) >= maxSessions {
		var oldest [32]byte
		var at time.Time
		for k, v := range s.byID {
			if at.IsZero() || v.expires.Before(at) {
				oldest, at = k, v.expires
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

// get returns the live session for the id, or nil.
func (s *sessions) get(id string, now time.Time) *session {
	if id == "" {
		return nil
	}
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.byID[key]
	if sess == nil {
		return nil
	}
	if !now.Before(sess.expires) {
		delete(s.byID, key)
		return nil
	}
	return sess
}

// end deletes a session.
func (s *sessions) end(id string) {
	s.mu.Lock()
	delete(s.byID, sha256.Sum256([]byte(id)))
	s.mu.Unlock()
}

// mintOnce records a fresh single-use login code valid until now +
// onceLifetime.
func (s *sessions) mintOnce(now time.Time) string {
	code := randomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	s.once[sha256.Sum256([]byte(code))] = now.Add(onceLifetime)
	return code
}

// useOnce consumes a login code: true once for a live code, false after.
func (s *sessions) useOnce(code string, now time.Time) bool {
	if code == "" {
		return false
	}
	key := sha256.Sum256([]byte(code))
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.once[key]
	delete(s.once, key)
	return ok && now.Before(exp)
}

func (s *sessions) pruneLocked(now time.Time) {
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
	for k, exp := range s.once {
		if !now.Before(exp) {
			delete(s.once, k)
		}
	}
}

// sameSecret compares two secrets in constant time whatever their lengths
// (the hashes have a fixed size).
func sameSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// sessionCookie is the cookie of a session id; an empty id and a negative
// maxAge clear it.
func sessionCookie(r *http.Request, id string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: cookieName, Value: id, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		// Secure only over TLS: on plain HTTP (a loopback listener) a
		// Secure cookie would never come back and nobody could log in.
		Secure: r.TLS != nil,
	}
}
