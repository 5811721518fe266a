package senderkind

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Params is the closed set of form parameters a form-posting sender
// documents (Twilio), each with the shape of its value. The receiver
// refuses a form with any other parameter, or with a value of another
// shape (HTTP 400); see twilioForm for why.
type Params map[string]Shape

// Shape is the form a parameter's value takes. The zero Shape is any
// text.
type Shape struct {
	// What names the shape in an error: "not <What>".
	What string
	re   *regexp.Regexp
}

// pattern is the shape of the values re matches in full.
func pattern(what, re string) Shape {
	return Shape{What: what, re: regexp.MustCompile(`\A(?:` + re + `)\z`)}
}

// oneOf is the shape of exactly the listed values; what is followed by
// the list in errors.
func oneOf(what string, values ...string) Shape {
	sorted := slices.Sorted(slices.Values(values))
	quoted := make([]string, len(sorted))
	for i, v := range sorted {
		quoted[i] = regexp.QuoteMeta(v)
	}
	return pattern(what+" ("+strings.Join(sorted, ", ")+")", strings.Join(quoted, "|"))
}

// Match reports whether v has the shape. The empty value matches every
// shape: senders leave parameters they have no value for empty (Twilio's
// CalledZip=); a parameter that must not be empty is required by the rule
// that reads it.
func (s Shape) Match(v string) bool {
	return v == "" || s.re == nil || s.re.MatchString(v)
}

// Text reports whether the shape is any text.
func (s Shape) Text() bool { return s.re == nil }

// sidSuffix ends the name of every parameter that holds a Twilio SID.
const sidSuffix = "Sid"

// sidShape is the shape of a Twilio SID: two capital letters naming the
// resource type, then 32 hex digits.
var sidShape = pattern("a Twilio SID (two capital letters and 32 hex digits)", `[A-Z]{2}[0-9a-fA-F]{32}`)

// With returns the set plus the named extra parameters, in a new map. An
// extra name the set already holds keeps its documented shape; a new one
// ending in "Sid" holds a SID, as every Twilio parameter so named does,
// and any other takes any text.
func (p Params) With(extra []string) Params {
	out := maps.Clone(p)
	for _, name := range extra {
		if _, ok := out[name]; ok {
			continue
		}
		if strings.HasSuffix(name, sidSuffix) {
			out[name] = sidShape
			continue
		}
		out[name] = Shape{}
	}
	return out
}

// Names returns the parameter names, sorted.
func (p Params) Names() []string {
	return slices.Sorted(maps.Keys(p))
}
