package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// CallsPath lists the calls a destination recorded, newest last, as
// {"calls":[{"n","at","method","path","query","headers","status","rule","body"}]}.
// It is never recorded itself and no rule applies to it.
const CallsPath = "/_dev/calls"

// Call is one request a destination received and what it answered.
type Call struct {
	N      int       `json:"n"`
	At     time.Time `json:"at"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Query  string    `json:"query,omitempty"`
	// Headers are the request's headers (the first value of each), with
	// credentials replaced by "[redacted]".
	Headers map[string]string `json:"headers"`
	Status  int               `json:"status"`
	// Rule is the fail rule that answered, "" when none did.
	Rule string `json:"rule,omitempty"`
	// Body is the request body as text, cut at maxBodyShown bytes.
	Body string `json:"body"`
}

// redacted are the headers whose values CallsPath never shows: a
// destination's credentials have no business on a page anyone on the
// machine can read.
var redacted = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "Cookie": true}

// maxBodyShown is how much of a request body the log line and CallsPath
// keep: enough to recognise a call, not a copy of large payloads.
const maxBodyShown = 2048

// Rule makes a destination answer Status to the calls it matches: every
// condition given must hold (none given: every call). It is written
// as space-separated key=value pairs (ParseRule):
//
//	path=/orders/ord_2 status=422
//	body.customer=cus_unknown status=422
//	method=PUT path=/crm/deals/* status=503 times=2
type Rule struct {
	Method string // "" for any method
	Path   string // a path.Match pattern; "" for any path
	Field  string // a dotted field of a JSON body (after "body."); "" for none
	Value  string // the field's value, as its text: a string's characters, a number or true/false/null as written
	Status int    // 400 to 599
	Times  int    // answer only the first Times matching calls (0: all of them)
}

// ParseRule reads a rule in the form Rule documents; its errors name the
// key at fault.
func ParseRule(s string) (*Rule, error) {
	r := &Rule{}
	seen := map[string]bool{}
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("%q: want key=value (keys: method, path, body.FIELD, status, times)", kv)
		}
		name := k
		if strings.HasPrefix(k, "body.") {
			name = "body"
		}
		if seen[name] {
			return nil, fmt.Errorf("%s is given twice", name)
		}
		seen[name] = true
		switch {
		case k == "method":
			r.Method = strings.ToUpper(v)
		case k == "path":
			if !strings.HasPrefix(v, "/") {
				return nil, fmt.Errorf("path %q: want a path starting with / (with * for any one segment)", v)
			}
			if _, err := path.Match(v, "/"); err != nil {
				return nil, fmt.Errorf("path %q: %v", v, err)
			}
			r.Path = v
		case name == "body":
			r.Field, r.Value = strings.TrimPrefix(k, "body."), v
			if r.Field == "" || strings.Contains(r.Field, "..") || strings.HasPrefix(r.Field, ".") || strings.HasSuffix(r.Field, ".") {
				return nil, fmt.Errorf("%q: want body.FIELD, with FIELD a dotted path such as customer.id", k)
			}
		case k == "status":
			n, err := strconv.Atoi(v)
			if err != nil || n < 400 || n > 599 {
				return nil, fmt.Errorf("status %q: want a failing HTTP status, 400 to 599", v)
			}
			r.Status = n
		case k == "times":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("times %q: want a positive number of calls", v)
			}
			r.Times = n
		default:
			return nil, fmt.Errorf("unknown key %q (keys: method, path, body.FIELD, status, times)", k)
		}
	}
	if r.Status == 0 {
		return nil, fmt.Errorf("status is missing: say which status to answer, e.g. status=422")
	}
	return r, nil
}

// String is the rule as ParseRule reads it.
func (r *Rule) String() string {
	var parts []string
	if r.Method != "" {
		parts = append(parts, "method="+r.Method)
	}
	if r.Path != "" {
		parts = append(parts, "path="+r.Path)
	}
	if r.Field != "" {
		parts = append(parts, "body."+r.Field+"="+r.Value)
	}
	parts = append(parts, "status="+strconv.Itoa(r.Status))
	if r.Times > 0 {
		parts = append(parts, "times="+strconv.Itoa(r.Times))
	}
	return strings.Join(parts, " ")
}

// matches reports whether the call meets every condition of the rule.
func (r *Rule) matches(method, p string, body []byte) bool {
	if r.Method != "" && r.Method != method {
		return false
	}
	if r.Path != "" {
		if ok, _ := path.Match(r.Path, p); !ok {
			return false
		}
	}
	if r.Field != "" {
		v, ok := bodyField(body, r.Field)
		if !ok || v != r.Value {
			return false
		}
	}
	return true
}

// bodyField is the text of a dotted field of a JSON object body.
func bodyField(body []byte, field string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	for _, name := range strings.Split(field, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[name]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	case nil:
		return "null", true
	}
	return "", false // an object or a list is not a value to compare
}

// match is the first rule that answers this call, counting it against
// the rule's times.
func (d *Destination) match(method, p string, body []byte) *Rule {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.rules {
		if r.Times > 0 && d.hits[r] >= r.Times {
			continue
		}
		if r.matches(method, p, body) {
			d.hits[r]++
			return r
		}
	}
	return nil
}

// record keeps the call for CallsPath and prints its line.
func (d *Destination) record(n int, r *http.Request, body []byte, status int, rule *Rule) {
	if status == 0 {
		status = http.StatusOK // a handler that wrote nothing answered 200
	}
	c := Call{N: n, At: d.now().UTC(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Headers: map[string]string{}, Status: status, Body: shown(body)}
	for k, vs := range r.Header {
		c.Headers[k] = vs[0]
		if redacted[k] {
			c.Headers[k] = "[redacted]"
		}
	}
	if rule != nil {
		c.Rule = rule.String()
	}
	d.mu.Lock()
	d.log = append(d.log, c)
	if len(d.log) > maxLog {
		d.log = append(d.log[:0:0], d.log[len(d.log)-maxLog:]...)
	}
	out := d.out
	d.mu.Unlock()
	if out == nil {
		return
	}
	target := c.Path
	if c.Query != "" {
		target += "?" + c.Query
	}
	why := ""
	if rule != nil {
		why = " (" + c.Rule + ")"
	}
	d.outMu.Lock()
	defer d.outMu.Unlock()
	line := fmt.Sprintf("%s #%d %s %s -> %d%s", c.At.Format(time.TimeOnly), n, c.Method, escapeControl(target), status, why)
	if c.Body != "" {
		line += " " + escapeControl(c.Body)
	}
	fmt.Fprintln(out, line)
}

// serveCalls answers CallsPath.
func (d *Destination) serveCalls(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	d.mu.Lock()
	calls := append([]Call{}, d.log...)
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string][]Call{"calls": calls})
}

// Recorded returns the calls recorded so far, oldest first.
func (d *Destination) Recorded() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Call{}, d.log...)
}

// shown is a body as text, cut at maxBodyShown bytes on a character
// boundary.
func shown(body []byte) string {
	if len(body) <= maxBodyShown {
		return string(body)
	}
	cut := maxBodyShown
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut]) + fmt.Sprintf("... (%d bytes in all)", len(body))
}

// escapeControl writes control characters and invalid bytes as escapes,
// so that a request cannot move the terminal's cursor or hide a line.
func escapeControl(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
