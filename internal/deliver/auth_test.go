package deliver_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store"
)

// Each kind of destination auth reaches a real destination as the header
// it names, on the call and on a lookup, and the credential is stored
// nowhere: not in the attempts, the effect, the audit trail or the log.
func TestDestinationAuthIsSentAndNeverStored(t *testing.T) {
	const secret = "s3cr3t-credential-value"
	cases := []struct {
		name, auth, header, want string
	}{
		{"bearer", "auth: {bearer: " + secret + "}", "Authorization", "Bearer " + secret},
		{"basic", "auth: {basic: {user: svc, password: " + secret + "}}", "Authorization",
			"Basic " + base64.StdEncoding.EncodeToString([]byte("svc:"+secret))},
		{"header", "auth: {header: {name: X-Api-Key, value: " + secret + "}}", "X-Api-Key", secret},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A 500 then a 400: two calls, a retry and a dead effect, so a
			// reason, attempts, audit rows and a notification all exist.
			x := newWorld(t, setup{dest: tc.auth})
			e := x.order("o1", 1)
			x.dest.Script(e.EpisodeKey, delivertest.Fail500, delivertest.Fail400)
			x.until(e.ID, store.EffectDead)
			reqs := x.dest.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests reached the destination, want 2", len(reqs))
			}
			for _, r := range reqs {
				if got := r.Header.Get(tc.header); got != tc.want {
					t.Errorf("%s %s: %s = %q, want %q", r.Method, r.Path, tc.header, got, tc.want)
				}
			}
			// Nothing stored or logged carries the credential.
			var stored []string
			ef := x.get(e.ID)
			stored = append(stored, ef.Reason, ef.SuggestedRepair, ef.LastResponse, string(ef.Request))
			for _, a := range x.attempts(e.ID) {
				stored = append(stored, a.Error, a.Response, a.RetryAfter)
			}
			rows, err := x.st.AuditList(x.ctx, &store.AuditListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range rows {
				stored = append(stored, a.Detail)
			}
			stored = append(stored, x.logs.String())
			stored = append(stored, x.hook.all()...)
			for _, s := range stored {
				if strings.Contains(s, secret) || strings.Contains(s, base64.StdEncoding.EncodeToString([]byte("svc:"+secret))) {
					t.Fatalf("the credential is stored or logged: %q", s)
				}
			}
		})
	}
}
