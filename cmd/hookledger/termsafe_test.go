package main

import "testing"

func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":                    "plain text",
		"two\nlines\tand a tab":         "two\nlines\tand a tab",
		"\x1b]0;pwned\x07title":         `\x1b]0;pwned\x07title`,
		"erase\r\x1b[2Kline":            `erase\r\x1b[2Kline`,
		"del\x7f c1\u009b":              `del\x7f c1\x9b`,
		"bad \xff utf-8":                `bad \xff utf-8`,
		"rtl \u202eevil\u202c":          `rtl \u202eevil\u202c`,
		"accents: déjà vu, 日本, emoji 🚀": "accents: déjà vu, 日本, emoji 🚀",
	} {
		if got := termSafe(in); got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTermLine(t *testing.T) {
	if got, want := termLine("a\nb\tc\x1b[0m d\u00e9"), `a\nb\tc\x1b[0m dé`; got != want {
		t.Errorf("termLine = %q, want %q", got, want)
	}
}
