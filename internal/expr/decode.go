package expr

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeJSON parses a JSON document into CEL-friendly Go values: objects
// become map[string]any, arrays []any, integers that fit stay int64 (so
// revision 3 compares as an int), other numbers become float64.
//
// It answers exactly as a json.Decoder with UseNumber would, followed by
// the number conversion: the first value is decoded and anything after it
// is left unread, a repeated key keeps its last value, and a string's
// invalid UTF-8 or lone surrogate becomes U+FFFD. FuzzDecodeJSON holds it
// to that for any input. It is written here, not taken from encoding/json,
// because decoding into interface values through reflection was the flow
// engine's largest cost (an event body is decoded to route the event and,
// unless its work is prepared with the routing, again to process it);
// encoding/json/v2 is not yet stable, and the faster
// third-party decoders differ from encoding/json on numbers or repeated
// keys, which would change what an expression sees.
func DecodeJSON(b []byte) (any, error) {
	// One copy of the document as a string: keys and plain strings are
	// slices of it, not an allocation each.
	d := decoder{b: b, s: string(b)}
	d.space()
	if d.i == len(b) {
		return nil, errors.New("decode JSON: empty document")
	}
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return v, nil
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

type decoder struct {
	b []byte
	s string // b as a string
	i int
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// unexpected describes the byte at the cursor, or the end of the input.
func (d *decoder) unexpected(context string) error {
	if d.i >= len(d.b) {
		return fmt.Errorf("unexpected end of JSON input %s", context)
	}
	return fmt.Errorf("invalid character %s %s (offset %d)", quoteChar(d.b[d.i]), context, d.i)
}

func quoteChar(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c == '"':
		return `'"'`
	case c < 0x20 || c >= 0x7f:
		return strconv.Quote(string(rune(c)))
	}
	return "'" + string(c) + "'"
}

// value decodes the value at the cursor (no leading space).
func (d *decoder) value(depth int) (any, error) {
	if d.i >= len(d.b) {
		return nil, d.unexpected("looking for beginning of value")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		if depth >= maxDepth {
			return nil, errors.New("exceeded max depth")
		}
		return d.object(depth + 1)
	case c == '[':
		if depth >= maxDepth {
			return nil, errors.New("exceeded max depth")
		}
		return d.array(depth + 1)
	case c == '"':
		return d.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.unexpected("looking for beginning of value")
}

func (d *decoder) literal(word string) error {
	for j := 0; j < len(word); j++ {
		if d.i >= len(d.b) || d.b[d.i] != word[j] {
			return d.unexpected("in literal " + word)
		}
		d.i++
	}
	return nil
}

func (d *decoder) object(depth int) (any, error) {
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.unexpected("looking for beginning of object key string")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.unexpected("after object key")
		}
		d.i++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		if more, err := d.next('}', "after object key:value pair"); err != nil || !more {
			return m, err
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	d.i++ // [
	a := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		if more, err := d.next(']', "after array element"); err != nil || !more {
			return a, err
		}
	}
}

// next reads what follows a member of an object or array: a comma (true:
// another member follows) or the closing byte (false).
func (d *decoder) next(closing byte, where string) (bool, error) {
	d.space()
	if d.i < len(d.b) {
		switch d.b[d.i] {
		case ',':
			d.i++
			d.space()
			return true, nil
		case closing:
			d.i++
			return false, nil
		}
	}
	return false, d.unexpected(where)
}

// number reads a number as the JSON grammar spells it and converts it as
// json.Number's Int64, then Float64, would. A number beyond the range of a
// float64 is refused: as ±Inf it would reach states and requests as the
// string "Infinity", a value the sender never sent.
func (d *decoder) number() (any, error) {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case digits() == 0:
		return nil, d.unexpected("in numeric literal")
	}
	isInt := true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		isInt = false
		d.i++
		if digits() == 0 {
			return nil, d.unexpected("after decimal point in numeric literal")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		isInt = false
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.unexpected("in exponent of numeric literal")
		}
	}
	text := d.s[start:d.i]
	if isInt {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n, nil
		}
	}
	f, _ := strconv.ParseFloat(text, 64)
	if math.IsInf(f, 0) {
		if len(text) > 24 {
			text = text[:24] + "…"
		}
		return nil, fmt.Errorf("number %s is beyond the range of a 64-bit float (offset %d)", text, start)
	}
	return f, nil
}

// plain marks the bytes a string's fast path passes over: printable
// ASCII but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads a string at the cursor (on its opening quote).
func (d *decoder) str() (string, error) {
	d.i++ // "
	start := d.i
	// The common case: no escapes and valid UTF-8 is the text as is.
	ascii := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		if plain[c] {
			d.i++
			continue
		}
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if ascii || utf8.Valid(s) {
				return d.s[start : d.i-1], nil
			}
			return string(fixUTF8(s)), nil
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", d.unexpected("in string literal")
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return "", d.unexpected("in string literal")
}

// escaped finishes a string with escapes, copying from start.
func (d *decoder) escaped(start int) (string, error) {
	out := make([]byte, 0, d.i-start+16)
	out = append(out, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				out = fixUTF8(out)
			}
			return string(out), nil
		case c < 0x20:
			return "", d.unexpected("in string literal")
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		d.i++ // backslash
		if d.i >= len(d.b) {
			break
		}
		switch e := d.b[d.i]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4(d.i + 1)
			if !ok {
				return "", fmt.Errorf("invalid \\u escape in string literal (offset %d)", d.i-1)
			}
			d.i += 4
			if utf16.IsSurrogate(r) {
				// A pair is one rune; anything else is a replacement
				// character, and the next escape is read on its own.
				if d.i+2 < len(d.b) && d.b[d.i+1] == '\\' && d.b[d.i+2] == 'u' {
					if r2, ok := d.hex4(d.i + 3); ok {
						if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
							d.i += 6
							out = utf8.AppendRune(out, dec)
							break
						}
					}
				}
				r = unicode.ReplacementChar
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", d.unexpected("in string escape code")
		}
		d.i++
	}
	return "", d.unexpected("in string literal")
}

// hex4 reads four hex digits at j.
func (d *decoder) hex4(j int) (rune, bool) {
	if j+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[j : j+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// fixUTF8 replaces each byte of an invalid sequence with U+FFFD, as
// encoding/json does.
func fixUTF8(s []byte) []byte {
	out := make([]byte, 0, len(s)+8)
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, unicode.ReplacementChar)
		} else {
			out = append(out, s[:n]...)
		}
		s = s[n:]
	}
	return out
}
