package console

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

//go:embed templates/*.html assets
var embedded embed.FS

// consoleCSS is the one stylesheet; the login page inlines it, because no
// asset is served before login.
var consoleCSS = mustRead("assets/console.css")

// loginStyleHash lets the Content-Security-Policy allow exactly the login
// page's inline stylesheet and no other inline style.
var loginStyleHash = func() string {
	sum := sha256.Sum256([]byte(consoleCSS))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}()

func mustRead(name string) string {
	b, err := embedded.ReadFile(name)
	if err != nil {
		panic("console: embedded " + name + ": " + err.Error())
	}
	return string(b)
}

// pages holds one template set per page: the layout with that page's
// "content" (parsed apart, so that each page's blocks cannot collide).
type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"ts":    formatTime,
	"dur":   formatDuration,
	"badge": badgeClass,
	// Links are built in Go and given whole, so the template's URL
	// escaping never mangles a query.
	"entityURL": entityLink,
	"eventURL":  eventLink,
	"bulkURL":   bulkRetryLink,
	"pct":       percent,
	// An effect's suggested repair: empty outside the exception queue's
	// states, the worker's own words or its class's suggestion inside.
	"effectRepair": store.EffectRepair,
	"since":        since,
}

// since is how long ago t was at now, to the second: an entry's age in
// the exception queue.
func since(now, t time.Time) string {
	return age(now, t).String()
}

// age is how long ago t was at now, to the second.
func age(now, t time.Time) time.Duration {
	return now.Sub(t).Truncate(time.Second)
}

func mustParsePages() *pages {
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range []string{"overview", "events", "event", "effects", "effect", "entity", "error",
		"bulk", "job", "replay", "destinations", "endpoints", "audit"} {
		p.byName[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(embedded,
			"templates/layout.html", "templates/rows.html", "templates/"+name+".html"))
	}
	p.byName["login"] = template.Must(template.New("login").Funcs(funcs).ParseFS(embedded, "templates/login.html"))
	// A fragment renders one block of the rows file alone.
	p.byName["rows"] = template.Must(template.New("rows").Funcs(funcs).ParseFS(embedded, "templates/rows.html"))
	return p
}

// view is what every page template gets.
type view struct {
	Title string
	// Nav names the navigation entry of the page (aria-current).
	Nav   string
	CSRF  string
	Flash string
	Error string
	Data  any
}

// render writes a page in the layout; a template failure after the first
// byte cannot change the status, so pages render into a buffer first.
func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, name string, v *view) {
	if s := sessionOf(r); s != nil {
		v.CSRF = s.csrf
	}
	c.execute(w, code, name, "layout", v)
}

// fragment writes one block of rows.html (an htmx refresh).
func (c *Console) fragment(w http.ResponseWriter, code int, block string, data any) {
	c.execute(w, code, "rows", block, data)
}

func (c *Console) execute(w http.ResponseWriter, code int, set, tmpl string, data any) {
	buf := &pageBuffer{most: maxPageBytes}
	if err := c.pages.byName[set].ExecuteTemplate(buf, tmpl, data); err != nil {
		if errors.Is(err, errPageTooLarge) {
			c.log.Error("console: page over budget", "template", set+"/"+tmpl, "most_bytes", maxPageBytes)
			http.Error(w, fmt.Sprintf("This page would be larger than the %d MiB the console builds a page to. ", maxPageBytes>>20)+
				"Narrow it with its filters or a smaller limit=, or read the same data through the admin API.",
				http.StatusInternalServerError)
			return
		}
		c.log.Error("console: render failed", "template", set+"/"+tmpl, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

func (c *Console) renderLogin(w http.ResponseWriter, code int, next, msg string) {
	c.execute(w, code, "login", "login", struct {
		CSS   template.CSS
		Next  string
		Error string
	}{template.CSS(consoleCSS), next, msg})
}

// fail renders an error page with the status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	c.render(w, r, code, "error", &view{Title: http.StatusText(code), Error: msg})
}

// storeFailed answers a store failure: 503, with the database's own words
// in the log only (they can name files, hosts or SQL).
// textParams answers 400 naming the first of the name, value pairs whose
// value no store can hold (NUL, invalid UTF-8): it can name nothing, and
// PostgreSQL refuses it as a parameter, which would read as the store
// failing. It reports whether every value is text.
func (c *Console) textParams(w http.ResponseWriter, r *http.Request, pairs ...string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := store.CheckText(pairs[i], pairs[i+1]); err != nil {
			c.fail(w, r, http.StatusBadRequest, "The parameter "+err.Error()+".")
			return false
		}
	}
	return true
}

func (c *Console) storeFailed(w http.ResponseWriter, r *http.Request, op string, err error) {
	c.log.Error("console: store failed", "op", op, "err", err)
	c.fail(w, r, http.StatusServiceUnavailable, "The store is unavailable; try again in a moment.")
}

// formatTime shows times in UTC to the second, the zone spelled out so a
// pasted line is unambiguous; "—" for none.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func formatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// badgeClass groups states and dispositions by what they ask of an
// operator; the badge always shows the word too, never colour alone.
func badgeClass(state any) string {
	switch fmt.Sprint(state) {
	case "applied", "done", "acknowledged", "resolved":
		return "badge ok"
	case "dead", "dead_lettered", "needs_reconciliation":
		return "badge alert"
	case "accepted", "approved", "submitting", "retry_wait":
		return "badge pending"
	default:
		return "badge neutral"
	}
}
