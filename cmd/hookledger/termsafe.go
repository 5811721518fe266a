package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe makes text from the network or the store safe to print on a
// terminal: control characters (escape sequences could rewrite the screen
// or the title, or hide what follows), DEL, C1 controls, bidirectional
// overrides and invalid UTF-8 are written as Go escapes. Newlines and tabs
// are kept; termLine escapes them too, for one-line output.
func termSafe(s string) string { return escapeTerminal(s, false) }

// termLine is termSafe for output that must stay on one line.
func termLine(s string) string { return escapeTerminal(s, true) }

func escapeTerminal(s string, oneLine bool) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r, oneLine) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && oneLine:
			b.WriteString(`\n`)
		case r == '\t' && oneLine:
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case unsafeRune(r, oneLine):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

func unsafeRune(r rune, oneLine bool) bool {
	switch {
	case r == utf8.RuneError:
		return true
	case r == '\n' || r == '\t':
		return oneLine
	case unicode.IsControl(r): // C0, DEL and C1
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidirectional overrides and isolates
		return true
	}
	return false
}
