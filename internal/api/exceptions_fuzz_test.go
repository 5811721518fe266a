package api

import (
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// FuzzDecodeExceptionCursor: a cursor comes from the query string, so any
// text may arrive. Decoding never panics; what it accepts names one of the
// two kinds and an id that is not negative, and encodes back to a cursor
// that decodes to the same page.
func FuzzDecodeExceptionCursor(f *testing.F) {
	for _, s := range []string{"", EncodeExceptionCursor(store.ExceptionEffect, 7), EncodeExceptionCursor(store.ExceptionEvent, 0),
		"ZWZmZWN0Oi0x", "!!", "ZXZlbnQ6OTIyMzM3MjAzNjg1NDc3NTgwOA", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, c string) {
		kind, id, err := decodeExceptionCursor(c)
		if err != nil {
			return
		}
		if kind != store.ExceptionEffect && kind != store.ExceptionEvent || id < 0 {
			t.Fatalf("DecodeExceptionCursor(%q) = %q, %d: accepted a kind or id no page has", c, kind, id)
		}
		k2, id2, err := decodeExceptionCursor(EncodeExceptionCursor(kind, id))
		if err != nil || k2 != kind || id2 != id {
			t.Fatalf("cursor %q -> %q %d does not round-trip: %q %d %v", c, kind, id, k2, id2, err)
		}
	})
}
