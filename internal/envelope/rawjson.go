package envelope

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// rawJSON is a JSON value kept as its text: a verified body is validated
// once as a whole, and a path then walks the text to the one value it
// names. Decoding a body into maps and slices to read four fields of it
// cost more than verifying its signature and storing it together (about
// 80 µs and 280 allocations for a 2 KB Stripe invoice event), and most of
// a webhook is never looked at.
//
// The walk is written here rather than taken from a JSON path library
// because it must answer exactly as encoding/json would after a full
// decode, which the rest of hookledger (flows, the console) does: the last
// of repeated keys wins, escaped keys match their unescaped text, strings
// decode with encoding/json. It only ever runs on text validJSON
// accepted, and FuzzRawLookupMatchesDecode holds it to a full decode.
type rawJSON []byte

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string that opens at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// structural marks the bytes valueEnd stops at inside an object or array.
var structural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// valueEnd returns the index just past the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			c := b[i]
			if !structural[c] {
				continue
			}
			switch c {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for ; i < len(b); i++ { // a number, true, false or null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// kind is the first byte of the value: '{', '[', '"', 't', 'f', 'n' or a
// number's first character; 0 for no value.
func (r rawJSON) kind() byte {
	if i := skipSpace(r, 0); i < len(r) {
		return r[i]
	}
	return 0
}

// member returns the value of the object's last member named key.
func (r rawJSON) member(key string) (rawJSON, bool) {
	i := skipSpace(r, 0)
	if i >= len(r) || r[i] != '{' {
		return nil, false
	}
	var found rawJSON
	ok := false
	for i = skipSpace(r, i+1); i < len(r) && r[i] == '"'; {
		ke := stringEnd(r, i)
		name := r[i:ke]
		i = skipSpace(r, ke)
		if i >= len(r) || r[i] != ':' {
			return nil, false
		}
		i = skipSpace(r, i+1)
		ve := valueEnd(r, i)
		if keyIs(name, key) {
			found, ok = r[i:ve], true
		}
		if i = skipSpace(r, ve); i < len(r) && r[i] == ',' {
			i = skipSpace(r, i+1)
			continue
		}
		break
	}
	return found, ok
}

// indexed returns an object as a map of its members, each still rawJSON,
// and any other value as it is. A body's root and a batch's events are
// indexed once, because every identity path starts there.
func (r rawJSON) indexed() any {
	i := skipSpace(r, 0)
	if i >= len(r) || r[i] != '{' {
		return r
	}
	obj := make(map[string]any, 16)
	for i = skipSpace(r, i+1); i < len(r) && r[i] == '"'; {
		ke := stringEnd(r, i)
		name := r[i:ke]
		i = skipSpace(r, ke)
		if i >= len(r) || r[i] != ':' {
			return r
		}
		i = skipSpace(r, i+1)
		ve := valueEnd(r, i)
		if key, ok := keyText(name); ok {
			obj[key] = r[i:ve] // the last of repeated keys wins
		}
		if i = skipSpace(r, ve); i < len(r) && r[i] == ',' {
			i = skipSpace(r, i+1)
			continue
		}
		break
	}
	return obj
}

// elements returns the array's elements.
func (r rawJSON) elements() ([]rawJSON, bool) {
	i := skipSpace(r, 0)
	if i >= len(r) || r[i] != '[' {
		return nil, false
	}
	var out []rawJSON
	for i = skipSpace(r, i+1); i < len(r) && r[i] != ']'; {
		ve := valueEnd(r, i)
		out = append(out, r[i:ve])
		if i = skipSpace(r, ve); i < len(r) && r[i] == ',' {
			i = skipSpace(r, i+1)
			continue
		}
		break
	}
	return out, true
}

// index returns the array's element n.
func (r rawJSON) index(n int) (rawJSON, bool) {
	i := skipSpace(r, 0)
	if n < 0 || i >= len(r) || r[i] != '[' {
		return nil, false
	}
	for i = skipSpace(r, i+1); i < len(r) && r[i] != ']'; n-- {
		ve := valueEnd(r, i)
		if n == 0 {
			return r[i:ve], true
		}
		if i = skipSpace(r, ve); i < len(r) && r[i] == ',' {
			i = skipSpace(r, i+1)
			continue
		}
		break
	}
	return nil, false
}

// keyIs reports whether the quoted key names key once decoded. A key that
// is plain ASCII without escapes is its own text; any other is decoded as
// encoding/json would (escapes resolved, invalid UTF-8 replaced).
func keyIs(quoted []byte, key string) bool {
	if plainKey(quoted) {
		return len(quoted) == len(key)+2 && string(quoted[1:len(quoted)-1]) == key
	}
	s, ok := keyText(quoted)
	return ok && s == key
}

// keyText decodes a quoted key.
func keyText(quoted []byte) (string, bool) {
	if len(quoted) >= 2 && plainKey(quoted) {
		return string(quoted[1 : len(quoted)-1]), true
	}
	var s string
	return s, json.Unmarshal(quoted, &s) == nil
}

// plainKey reports whether a quoted key is ASCII without escapes, which
// decodes to its own text.
func plainKey(quoted []byte) bool {
	for _, c := range quoted {
		if c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

// leaf turns the value a path ended on into what a full decode gives for
// it: a string, a json.Number, a bool or nil for null. Objects and arrays
// stay rawJSON, which no identity field accepts.
func (r rawJSON) leaf() any {
	switch r.kind() {
	case '"':
		q := bytes.TrimSpace(r)
		if inner := q[1 : len(q)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
			return string(inner) // what decoding gives, without its cost
		}
		var s string
		if json.Unmarshal(q, &s) != nil {
			return r
		}
		return s
	case 't':
		return true
	case 'f':
		return false
	case 'n':
		return nil
	case '{', '[', 0:
		return r
	}
	return json.Number(bytes.TrimSpace(r))
}
