package envelope

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// path is a parsed field path: dotted object keys, where an all-digit
// segment indexes an array (data.0.id). A leading "$." resolves from the
// document root instead of from the batch element, which matters only for
// batch kinds (Klaviyo's account lives in the envelope's meta, outside each
// event). "header:Name" reads a request header instead of the body, for
// senders that name the event outside the payload (GitHub's
// X-GitHub-Delivery). Keys that contain a dot cannot be addressed.
type path struct {
	text string
	hdr  string
	root bool
	segs []string
}

func parsePath(s string) (path, error) {
	p := path{text: s}
	if name, ok := strings.CutPrefix(s, "header:"); ok {
		p.hdr = strings.TrimSpace(name)
		if p.hdr == "" || strings.ContainsAny(p.hdr, " \t:") {
			return path{}, fmt.Errorf("path %q does not name a header", s)
		}
		return p, nil
	}
	if rest, ok := strings.CutPrefix(s, "$."); ok {
		p.root = true
		s = rest
	}
	if s == "" {
		return path{}, fmt.Errorf("path %q is empty", p.text)
	}
	for _, seg := range strings.Split(s, ".") {
		if seg == "" {
			return path{}, fmt.Errorf("path %q has an empty segment", p.text)
		}
		p.segs = append(p.segs, seg)
	}
	return p, nil
}

// mustPath parses a path known to be valid: a kind's (a constant) or the
// configuration's (checked by ValidatePaths first). Parsed paths are kept:
// they are a fixed set, and parsing one for every field of every event
// allocated its segments each time.
func mustPath(s string) path {
	if p, ok := parsedPaths.Load(s); ok {
		return p.(path)
	}
	p, err := parsePath(s)
	if err != nil {
		panic(err) // defaults are constants; a bad one is a programming error
	}
	parsedPaths.Store(s, p)
	return p
}

// parsedPaths holds mustPath's answers by path text.
var parsedPaths sync.Map

// lookup walks p from elem (or root), or reads the header. Missing keys,
// out-of-range indexes, walking into a scalar and an empty header all
// report not found.
func (p path) lookup(root, elem any, h http.Header) (any, bool) {
	if p.hdr != "" {
		v := strings.TrimSpace(h.Get(p.hdr))
		return v, v != ""
	}
	v := elem
	if p.root {
		v = root
	}
	for _, seg := range p.segs {
		switch node := v.(type) {
		case rawJSON:
			var next rawJSON
			ok := false
			switch node.kind() {
			case '{':
				next, ok = node.member(seg)
			case '[':
				if i, err := strconv.Atoi(seg); err == nil {
					next, ok = node.index(i)
				}
			}
			if !ok {
				return nil, false
			}
			v = next
		case map[string]any:
			next, ok := node[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	if r, ok := v.(rawJSON); ok {
		v = r.leaf()
	}
	if v == nil {
		return nil, false // JSON null counts as absent
	}
	return v, true
}

// scalar renders a string or number value. Numbers keep their literal digits
// so that ids above 2^53 survive.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	}
	return "", false
}

// Bounds for occurrence times: before 1970 or after 9999 is not a real
// webhook time and would not survive RFC 3339 formatting in storage.
const (
	maxUnix      int64 = 253402300799 // 9999-12-31T23:59:59Z
	maxUnixMilli       = maxUnix*1000 + 999
)

// parseTime reads a JSON number or a digit string as a unix time in unit,
// and any other string as RFC 3339 (a zone-less "2006-01-02T15:04:05" or
// "2006-01-02 15:04:05" is taken as UTC).
func parseTime(v any, unit time.Duration) (time.Time, bool) {
	var digits string
	switch x := v.(type) {
	case json.Number:
		digits = x.String()
	case string:
		if isDigits(x) {
			digits = x
			break
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"} {
			if t, err := time.Parse(layout, x); err == nil {
				return inRange(t)
			}
		}
		return time.Time{}, false
	default:
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, false
	}
	if unit == time.Millisecond {
		if n > maxUnixMilli {
			return time.Time{}, false
		}
		return inRange(time.UnixMilli(n))
	}
	if n > maxUnix {
		return time.Time{}, false
	}
	return inRange(time.Unix(n, 0))
}

func inRange(t time.Time) (time.Time, bool) {
	if t.Unix() < 0 || t.Unix() > maxUnix {
		return time.Time{}, false
	}
	return t.UTC(), true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
