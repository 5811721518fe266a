// Package bodyview shows a stored body to a person (an event's body, a
// projection's state, an effect's request) within a fixed budget, whatever
// the body holds. The console's pages and the CLI's effects show use it, so
// both show the same text and cut it at the same place.
//
// A body is pretty-printed only when it is JSON of at most PrettyMaxBytes,
// nested at most PrettyMaxDepth deep, and its indented text fits in
// PrettyMaxText; any other body is shown as stored, its first RawMaxBytes
// at most, and the View says how much was cut and why it is not indented.
// Indenting is where the cost was: every line is indented by its depth, so
// a 20 KB array nested 9,990 deep indents to 200 MB. Bounding the input,
// the depth and the output keeps the text, and the memory to make it,
// within a few hundred kilobytes for any body.
//
// The raw bytes themselves are never part of a view: the console serves
// them apart (as an attachment) and effects show --format json prints them
// whole.
package bodyview

import (
	"encoding/json"
	"unicode/utf8"
)

const (
	// PrettyMaxBytes is the largest body pretty-printed. Webhook bodies
	// are a few kilobytes (a Stripe invoice event with its object
	// expanded is under 10 KB), so 64 KiB indents every ordinary one and
	// leaves out only exports and batches, where indentation helps
	// little and the raw bytes are the better view anyway.
	PrettyMaxBytes = 64 << 10
	// prettyMaxDepth is the deepest nesting pretty-printed. Vendor
	// payloads nest under ten levels; at 32 an indented line starts with
	// at most 64 spaces, so the indented text stays within a small
	// multiple of the body.
	prettyMaxDepth = 32
	// prettyMaxText bounds the indented text: a body whose indentation
	// would take it past twice PrettyMaxBytes (a long flat array deep
	// down, one element a line) is shown as stored instead, and whole,
	// since it is within RawMaxBytes.
	prettyMaxText = 2 * PrettyMaxBytes
	// RawMaxBytes is the most of a body shown as stored: as much as the
	// largest body pretty-printed, so that no view is larger than a page
	// can hold comfortably. The rest is cut; the raw bytes hold it.
	RawMaxBytes = 64 << 10
)

// Why a JSON body is shown as stored rather than indented.
const (
	reasonTooLarge    = "larger than 64 KiB"
	reasonTooDeep     = "nested deeper than 32 levels"
	reasonTooIndented = "indented it would be larger than 128 KiB"
)

// View is a body as it is shown.
type View struct {
	// Text is what to show: valid UTF-8 (bytes that are not become
	// U+FFFD), at most PrettyMaxText bytes when Pretty, else at most
	// RawMaxBytes.
	Text string
	// Pretty says Text is the body indented, two spaces a level.
	Pretty bool
	// Size is the whole body's size in bytes; Shown is how many of its
	// first bytes Text holds (Size when nothing was cut).
	Size, Shown int
	// Reason says why a body that looks like JSON is shown as stored
	// (one of the Reason constants); "" when it is pretty-printed or is
	// not JSON.
	Reason string
}

// Cut reports that Text holds only the body's first Shown bytes.
func (v View) Cut() bool { return v.Shown < v.Size }

// Render is the view of body b.
func Render(b []byte) View { return RenderPrefix(b, len(b)) }

// RenderPrefix is the view of a body of size bytes of which prefix holds
// the first ones (a store can read just those): at least RawMaxBytes of
// them, or the whole body. A prefix shorter than the body is never
// pretty-printed, since only a body within PrettyMaxBytes is, and such a
// body is within RawMaxBytes.
func RenderPrefix(prefix []byte, size int) View {
	size = max(size, len(prefix))
	v := View{Size: size}
	// JSON is UTF-8 (RFC 8259), and json.Valid does not check that its
	// strings are: a body that is not UTF-8 is shown as stored, each byte
	// that is not UTF-8 as U+FFFD. The bounded indent runs before
	// json.Valid, whose parser stack grows with the depth it bounds.
	if size <= PrettyMaxBytes && len(prefix) == size && utf8.Valid(prefix) {
		text, reason := indent(prefix, prettyMaxDepth, prettyMaxText)
		switch {
		case reason == "" && json.Valid(prefix):
			v.Text, v.Pretty, v.Shown = text, true, size
			return v
		case reason != "" && looksLikeJSON(prefix):
			v.Reason = reason
		}
	} else if size > PrettyMaxBytes && looksLikeJSON(prefix) {
		v.Reason = reasonTooLarge
	}
	v.Text, v.Shown = rawText(prefix, RawMaxBytes)
	return v
}

// looksLikeJSON reports a body that starts like a JSON object or array,
// for the note saying why it is not indented; it is not checked further
// (a body too large to indent is never parsed).
func looksLikeJSON(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return false
}

// rawText is as much of b as fits in most bytes of valid UTF-8 (a byte
// that is not UTF-8 becomes U+FFFD), cut between characters, and how many
// bytes of b it holds.
func rawText(b []byte, most int) (string, int) {
	if n := min(len(b), most); utf8.Valid(b[:n]) {
		return string(b[:n]), n
	}
	out := make([]byte, 0, min(len(b), most))
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		piece := b[i : i+size]
		if r == utf8.RuneError && size == 1 {
			piece = []byte(string(utf8.RuneError))
		}
		if len(out)+len(piece) > most {
			break
		}
		out = append(out, piece...)
		i += size
	}
	return string(out), i
}

// indent is json.Indent(src, "", "  ") for valid JSON src, which it does
// not check (on anything else it makes some text, never fails), with two
// bounds: it gives up, saying why, when the nesting
// goes deeper than maxDepth or the text grows past maxText. It never
// writes more than maxText plus one indented line.
func indent(src []byte, maxDepth, maxText int) (string, string) {
	dst := make([]byte, 0, min(2*len(src), maxText))
	depth, level := 0, 0
	inString, escaped, needIndent, started := false, false, false, false
	newline := func() {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, ' ', ' ')
		}
	}
	for i, c := range src {
		if inString {
			dst = append(dst, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			if started && level == 0 {
				// After the top-level value: json.Indent keeps the
				// trailing space as it is.
				dst = append(dst, src[i:]...)
				break
			}
			continue
		}
		started = true
		if needIndent && c != '}' && c != ']' {
			needIndent = false
			depth++
			newline()
		}
		switch c {
		case '"':
			inString = true
			dst = append(dst, c)
		case '{', '[':
			if level++; level > maxDepth {
				return "", reasonTooDeep
			}
			// The newline waits for the next token, so that an empty
			// object or array stays {} or [].
			needIndent = true
			dst = append(dst, c)
		case '}', ']':
			level--
			if needIndent {
				needIndent = false
			} else {
				depth--
				newline()
			}
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, c, ' ')
		default:
			dst = append(dst, c)
		}
		if len(dst) > maxText {
			return "", reasonTooIndented
		}
	}
	if len(dst) > maxText {
		return "", reasonTooIndented
	}
	return string(dst), ""
}
