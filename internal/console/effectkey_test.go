package console

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// The effect page shows the idempotency key its destination was sent
// beside the episode key (a vendor's dashboard shows that one), and
// nothing for a destination that dedupes on none.
func TestEffectPageShowsTheIdempotencyKeySent(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	con.Attach(Attachments{IdempotencyKey: func(destination, episodeKey string) (string, string) {
		if destination != "crm" {
			return "", ""
		}
		return "Idempotency-Key", "hl1_<" + episodeKey + ">"
	}})
	c := newClient(t, srv)
	c.login()
	e, err := f.st.EffectGet(context.Background(), f.deadID)
	if err != nil || e == nil {
		t.Fatal(e, err)
	}
	_, body := c.get("/effects/" + strconv.FormatInt(f.deadID, 10))
	want := `<span id="idempotency-key">hl1_&lt;` + e.EpisodeKey + `&gt;</span> (header Idempotency-Key)`
	if !strings.Contains(body, want) || !strings.Contains(body, "Idempotency key sent") {
		t.Errorf("effect page lacks %s", want)
	}
	con.Attach(Attachments{IdempotencyKey: func(string, string) (string, string) { return "", "" }})
	if _, body := c.get("/effects/" + strconv.FormatInt(f.deadID, 10)); strings.Contains(body, "Idempotency key sent") {
		t.Errorf("a key shown for a destination that sends none")
	}
}
