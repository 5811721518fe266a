package outbound

import (
	"net/http"
	"strings"
	"testing"
)

func TestEncodeHeaderValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"shop/evt_123", "shop/evt_123"},
		{"", ""},
		{"shop/ctl\u0085id", "shop/ctl%C2%85id"},
		{"esc\x1b[31m", "esc%1B[31m"},
		{"a b\tc\r\nd", "a%20b%09c%0D%0Ad"},
		{"del\x7f", "del%7F"},
		{"café", "caf%C3%A9"},
		{"100%", "100%25"},
		{"%41", "%2541"},
		{"\x00", "%00"},
	} {
		got := EncodeHeaderValue(tc.in)
		if got != tc.want {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if back, err := DecodeHeaderValue(got); err != nil || back != tc.in {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v, want %q", got, back, err, tc.in)
		}
		if err := CheckHeader("X-Hookledger-Causation", got); err != nil || strings.ContainsFunc(got, func(r rune) bool { return r <= 0x20 || r >= 0x7f }) {
			t.Errorf("%q cannot be sent: %v", got, err)
		}
	}
}

func TestDecodeHeaderValueRefusesBrokenEscapes(t *testing.T) {
	for _, in := range []string{"100%", "a%4", "a%zz", "%G0", "%"} {
		if got, err := DecodeHeaderValue(in); err == nil || !strings.Contains(err.Error(), "two hex digits") {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v, want an error", in, got, err)
		}
	}
	if got, err := DecodeHeaderValue("caf%c3%a9"); err != nil || got != "café" {
		t.Errorf("lower-case hex: %q, %v", got, err)
	}
}

// What a receiver is sent is the causation header of any stored data:
// whatever the bytes, the encoded value is one a client sends and a
// server reads back unchanged, and it decodes to the bytes.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"shop/evt_1", "ctl\u0085id", "\x1b", "a b", "100%", "%41", "\xff\xfe", "€", "\r\nX-Evil: 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := EncodeHeaderValue(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c <= 0x20 || c >= 0x7f {
				t.Fatalf("EncodeHeaderValue(%q) = %q holds byte %#x", s, enc, c)
			}
		}
		if err := CheckHeader("X-Hookledger-Causation", enc); err != nil {
			t.Fatalf("EncodeHeaderValue(%q) = %q: %v", s, enc, err)
		}
		h := http.Header{}
		h.Set("X-Hookledger-Causation", enc)
		if h.Get("X-Hookledger-Causation") != enc {
			t.Fatalf("header changed %q", enc)
		}
		dec, err := DecodeHeaderValue(enc)
		if err != nil || dec != s {
			t.Fatalf("DecodeHeaderValue(%q) = %q, %v, want %q", enc, dec, err, s)
		}
		// Decoding untrusted text never panics, and what it accepts
		// encodes back to an equivalent form.
		if d, err := DecodeHeaderValue(s); err == nil {
			if again, err := DecodeHeaderValue(EncodeHeaderValue(d)); err != nil || again != d {
				t.Fatalf("decode(%q) = %q does not survive a round trip", s, d)
			}
		}
	})
}
