package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// safe makes text from payloads, the store or the command line fit to print
// on an operator's terminal: control characters (an ESC that would clear
// the screen or retitle the window, a newline that would forge a row, a tab
// that would shift the columns), the Unicode controls that reorder text on
// screen, and bytes that are not UTF-8 are written as \xNN or \uNNNN
// escapes. Everything else is printed as it is.
func safe(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x100 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case reorders(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || reorders(r) {
			return true
		}
	}
	return !utf8.ValidString(s)
}

// reorders reports the invisible characters that change how a terminal
// lays text out: bidirectional overrides and isolates (which can make a
// line read differently from its bytes) and the line and paragraph
// separators.
func reorders(r rune) bool {
	switch {
	case r == 0x200e, r == 0x200f, r == 0x061c: // LRM, RLM, ALM
		return true
	case r >= 0x202a && r <= 0x202e: // embeddings and overrides
		return true
	case r >= 0x2066 && r <= 0x2069: // isolates
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}
