package receive

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadBody reads bodies whose declared length is right, missing, too
// large or larger than the preallocation bound, one byte at a time, and
// one over the source's limit.
func TestReadBody(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 8192) // 128 KiB
	cases := []struct {
		name     string
		n        int
		declared int64
	}{
		{"exact", 2092, 2092},
		{"undeclared", 2092, -1},
		{"empty", 0, 0},
		{"declared larger than sent", 100, 5000},
		{"larger than the preallocation", len(body), int64(len(body))},
		{"declared beyond any limit", 10, 1 << 40},
	}
	for _, c := range cases {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(body[:c.n])
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := readBody(r, c.declared)
			if err != nil || !bytes.Equal(got, body[:c.n]) {
				t.Errorf("%s (one byte at a time %v): %d bytes, %v; want the %d bytes sent", c.name, oneByte, len(got), err, c.n)
			}
			if c.declared == int64(c.n) && c.n <= bodyPrealloc && cap(got) != c.n+1 {
				t.Errorf("%s: buffer of %d bytes for a declared %d-byte body, want one of %d", c.name, cap(got), c.n, c.n+1)
			}
			if cap(got) > max(c.n, bodyPrealloc+1)*2 {
				t.Errorf("%s: buffer of %d bytes for a %d-byte body", c.name, cap(got), c.n)
			}
		}
	}

	rec := httptest.NewRecorder()
	limited := http.MaxBytesReader(rec, io.NopCloser(strings.NewReader(strings.Repeat("x", 5000))), 4096)
	_, err := readBody(limited, 5000)
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		t.Errorf("a body over the limit: %v, want a MaxBytesError", err)
	}
}
