package deliver

import (
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// A response excerpt is stored as text on every driver, whatever the
// destination answered: a NUL byte, invalid UTF-8, or a cut through a
// multi-byte character would make PostgreSQL refuse the attempt's row, and
// the effect could then never be settled.
func TestExcerptIsStorableText(t *testing.T) {
	for name, body := range map[string][]byte{
		"NUL":              []byte("error\x00detail"),
		"invalid UTF-8":    []byte("caf\xe9 \xff"),
		"cut in a rune":    []byte(strings.Repeat("a", 1999) + "日本語のエラー"),
		"cut in a rune 2":  []byte(strings.Repeat("a", 1998) + "日本語のエラー"),
		"plain and short":  []byte(`{"error":"bad"}`),
		"exactly at limit": []byte(strings.Repeat("b", 2000)),
	} {
		got := excerpt(body, 2000)
		if err := store.CheckText("response", got); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if len(got) > 2000+len("…") {
			t.Errorf("%s: %d bytes, want at most 2000 and the ellipsis", name, len(got))
		}
	}
	if got := excerpt([]byte(`{"error":"bad"}`), 2000); got != `{"error":"bad"}` {
		t.Errorf("a short answer changed: %q", got)
	}
	if got := excerpt([]byte(strings.Repeat("a", 1999)+"日本"), 2000); got != strings.Repeat("a", 1999)+"…" {
		t.Errorf("cut: %q", got)
	}
}
