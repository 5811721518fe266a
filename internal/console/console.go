package console

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/hookledger/hookledger/internal/authlimit"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// Store is the part of the store contract the console reads and operates
// through; store.Store implements it.
type Store interface {
	EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error)
	DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error)
	AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error)
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
	EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error)
	AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error)
	ProjectionGet(ctx context.Context, p *store.ProjectionGetParams) (*store.Projection, error)
	EntityHistory(ctx context.Context, p *store.EntityHistoryParams) ([]*store.EntityHistoryItem, error)
}

// actor is who the audit trail names for an operator's action taken in the
// console.
const actor = "operator:console"

// Console is the console's handler; mount it at "/".
type Console struct {
	st       Store
	token    string
	enabled  bool
	log      *slog.Logger
	clk      clock.Clock
	sessions *sessions
	pages    *pages
	mux      *http.ServeMux
	// patterns are the routes of mux, in the order handle added them.
	patterns []string
	assets   http.Handler
	// guard counts wrong admin tokens per client address: guessing
	// online stops after a few tries from one address, whatever the
	// token's strength, and never locks out the operator elsewhere.
	guard *authlimit.Limiter
	// jobs runs bulk retries and replays in the background (jobs.go);
	// extra holds what the server hands over after New (extra.go).
	jobs  *jobs
	extra extra
	// signals are the thresholds the overview judges the signals by.
	signals config.Signals
}

// Option configures a Console.
type Option func(*Console)

// WithGuessLimit counts the login's wrong tokens in l, which the server
// shares with the admin API (one count per client for both) and which
// knows the trusted proxies; without it the console counts its own.
func WithGuessLimit(l *authlimit.Limiter) Option {
	return func(c *Console) { c.guard = l }
}

// New returns the console over st. An empty token turns the console off:
// every request answers 404, as the admin API refuses every request
// without a token, rather than leaving the console open.
func New(st Store, token string, log *slog.Logger, clk clock.Clock, opts ...Option) *Console {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	c := &Console{st: st, token: token, enabled: token != "", log: log, clk: clk,
		sessions: newSessions(), pages: mustParsePages(), mux: http.NewServeMux(),
		guard: authlimit.New(authlimit.Options{Now: clk.Now}), jobs: newJobs()}
	assets, err := fs.Sub(embedded, "assets")
	if err != nil {
		panic("console: embedded assets: " + err.Error())
	}
	c.assets = http.StripPrefix("/assets/", http.FileServerFS(assets))
	for _, o := range opts {
		o(c)
	}
	c.routes()
	return c
}

func (c *Console) routes() {
	c.handle("GET /login", c.loginPage)
	c.handle("POST /login", c.login)
	c.handle("POST /logout", c.logout)
	c.overviewRoutes()
	c.handle("GET /events", c.eventsPage)
	c.handle("GET /events/rows", c.eventRows)
	c.handle("GET /event", c.eventPage)
	c.handle("POST /event/resolve", c.resolveEvent)
	c.handle("GET /effects", c.effectsPage)
	c.handle("GET /effects/rows", c.effectRows)
	c.handle("GET /effects/{id}", c.effectPage)
	c.handle("POST /effects/{id}/{action}", c.operate)
	c.handle("GET /entity", c.entityPage)
	c.bodyRoutes()
	c.handle("GET /assets/", c.serveAsset)
	c.operationRoutes()
	c.handle("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such page: "+r.URL.Path)
	})
}

// handle adds a route to the mux and keeps its pattern, so that a test
// can hold every state-changing route to the CSRF check.
func (c *Console) handle(pattern string, h http.HandlerFunc) {
	c.patterns = append(c.patterns, pattern)
	c.mux.HandleFunc(pattern, h)
}

// MintLoginLink returns a one-time login path (/login?once=CODE) that logs
// a browser in without typing the token, once, within 15 minutes; the
// caller prefixes the listener's base URL. It returns "" when the console
// is off.
func (c *Console) MintLoginLink() string {
	if !c.enabled {
		return ""
	}
	return "/login?once=" + c.sessions.mintOnce(c.clk.Now())
}

type ctxKey struct{}

// sessionOf returns the request's session, nil on the login page.
func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(ctxKey{}).(*session)
	return s
}

// ServeHTTP authenticates every request but the login page's, checks the
// CSRF token of every state change, then routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.enabled {
		http.NotFound(w, r)
		return
	}
	securityHeaders(w.Header(), r.URL.Path)
	if r.URL.Path == "/login" {
		c.mux.ServeHTTP(w, r)
		return
	}
	var sess *session
	if ck, err := r.Cookie(cookieName); err == nil {
		sess = c.sessions.get(ck.Value, c.clk.Now())
	}
	if sess == nil {
		c.unauthenticated(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if !sameOrigin(r) || !sameSecret(csrfToken(w, r), sess.csrf) {
			c.log.Warn("console: state change refused: missing or wrong CSRF token or foreign origin",
				"method", r.Method, "path", r.URL.Path)
			c.fail(w, r, http.StatusForbidden, "This form is out of date or did not come from the console: reload the page and try again.")
			return
		}
	}
	c.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, sess)))
}

// unauthenticated answers a request without a live session: a page
// redirects to the login page (which comes back here after), while an
// asset, an htmx fragment or a state change answers 401, because a
// redirect there would put a login page where a script or a table row
// belongs.
func (c *Console) unauthenticated(w http.ResponseWriter, r *http.Request) {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || isFragment(r) {
		if r.Header.Get("HX-Request") != "" {
			// A list refreshing itself after the session ended reloads
			// its page, which then leads to the login page and back.
			w.Header().Set("HX-Refresh", "true")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("not logged in: open /login\n"))
		return
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

// isFragment tells an asset or a partial page from a page.
func isFragment(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasPrefix(p, "/assets/") || strings.HasSuffix(p, "/rows") || strings.HasSuffix(p, ".json") ||
		r.Header.Get("HX-Request") != ""
}

// csrfToken is the token a state change carries: the header (htmx), else
// the form field.
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if t := r.Header.Get(csrfHeader); t != "" {
		return t
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	return r.PostFormValue(csrfField)
}

// sameOrigin refuses a state change whose Origin header names another
// site. The CSRF token already stops forged forms; this refuses them
// before the body is read. A request without Origin (an older client) is
// left to the token.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// securityHeaders apply to every console answer: scripts and styles from
// the console only (the login page's one inline style by its hash), no
// framing, no referrer to other sites (a one-time login link must not
// leak), and no
// caching of pages that show business data.
func securityHeaders(h http.Header, path string) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' '"+loginStyleHash+
		"'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on the console's own form posts.
	h.Set("Referrer-Policy", "same-origin")
	if !strings.HasPrefix(path, "/assets/") {
		h.Set("Cache-Control", "no-store")
	}
}

func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request) {
	// Assets change only with the binary; an hour of caching saves the
	// polling pages nothing but keeps page loads quick.
	w.Header().Set("Cache-Control", "private, max-age=3600")
	c.assets.ServeHTTP(w, r)
}

// safeNext returns the local address to go to after login, or "/" for
// anything that could lead a browser to another site. It judges what
// http.Redirect will send, not the raw value: Redirect cleans "." and ".."
// out of the path, so "/./\host" would leave as "/\host". So the path is
// cleaned here first, and refused when it holds, as written or
// percent-decoded, a backslash, an empty segment ("//") or a control
// character: browsers read "\" as "/" and drop tabs and newlines, which
// turns "/\host" or "/<tab>/host" into "//host", another host.
func safeNext(next string) string {
	p, query, hasQuery := strings.Cut(next, "?")
	if !localPath(p) {
		return "/"
	}
	// The query cannot lead elsewhere, but a raw backslash or control
	// character has no business there either.
	if strings.ContainsAny(query, `\`) || strings.IndexFunc(query, isControl) >= 0 {
		return "/"
	}
	if dec, err := url.PathUnescape(p); err != nil || !localPath(dec) {
		return "/"
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && !strings.HasSuffix(clean, "/") {
		clean += "/"
	}
	if hasQuery {
		clean += "?" + query
	}
	u, err := url.Parse(clean)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return clean
}

// localPath reports whether p is an absolute path that no browser reads
// as the start of another host's address.
func localPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.Contains(p, "//") && !strings.Contains(p, `\`) &&
		strings.IndexFunc(p, isControl) < 0
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// loginPage serves GET /login: the form, or a one-time link's login.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if code := r.URL.Query().Get("once"); code != "" {
		if !c.sessions.useOnce(code, c.clk.Now()) {
			c.log.Warn("console: one-time login link refused: used already, expired or unknown", "client", c.guard.Client(r))
			c.renderLogin(w, http.StatusUnauthorized, next, "This login link was used already or has expired. Log in with the admin token.")
			return
		}
		c.startSession(w, r, next)
		return
	}
	if ck, err := r.Cookie(cookieName); err == nil && c.sessions.get(ck.Value, c.clk.Now()) != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	c.renderLogin(w, http.StatusOK, next, "")
}

// login serves POST /login: the admin token, once, for a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := safeNext(r.PostFormValue("next"))
	if !sameOrigin(r) {
		c.renderLogin(w, http.StatusForbidden, next, "This login form did not come from the console.")
		return
	}
	// While an address's tries are spent, its every login is refused, the
	// right token too: answering it would tell a guesser when it guessed
	// right. The lock-out was logged when it began.
	client := c.guard.Client(r)
	if wait := c.guard.Wait(client); wait > 0 {
		secs := authlimit.RetryAfter(wait)
		w.Header().Set("Retry-After", secs)
		c.renderLogin(w, http.StatusTooManyRequests, next, "Too many wrong tokens from this address: try again in "+secs+" seconds.")
		return
	}
	if !sameSecret(r.PostFormValue("token"), c.token) {
		c.log.Warn("console: login refused: wrong admin token", "client", client)
		if lock := c.guard.Fail(client); lock > 0 {
			c.log.Warn("console: too many wrong tokens: address locked out", "client", client, "tries", c.guard.Tries(), "locked_for", lock)
		}
		c.renderLogin(w, http.StatusUnauthorized, next, "Wrong token. Use the admin.token of this server's configuration.")
		return
	}
	c.startSession(w, r, next)
}

func (c *Console) startSession(w http.ResponseWriter, r *http.Request, next string) {
	// A cookie from before is replaced: a fresh id at every login, so an
	// id planted before login is worth nothing after it, and the session
	// it named ends here rather than live on beside the new one.
	if old, err := r.Cookie(cookieName); err == nil {
		c.sessions.end(old.Value)
	}
	id, _ := c.sessions.create(c.clk.Now())
	http.SetCookie(w, sessionCookie(r, id, int(sessionLifetime.Seconds())))
	c.log.Info("console: operator logged in", "client", c.guard.Client(r))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout serves POST /logout (CSRF-checked like every state change).
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.end(ck.Value)
	}
	http.SetCookie(w, sessionCookie(r, "", -1))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
