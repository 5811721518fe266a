package signature

import (
	"encoding/base64"
	"testing"
)

func TestPipedriveBasicAuth(t *testing.T) {
	s := mustNew(t, Options{Kind: KindPipedrive, Secrets: []string{"hookuser:old-pass", "hookuser:p@ss:with:colons"}})
	basic := func(v string) *Request {
		r := newReq()
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(v)))
		return r
	}
	for _, ok := range []string{"hookuser:old-pass", "hookuser:p@ss:with:colons"} {
		if err := s.Verify(basic(ok), t0); err != nil {
			t.Errorf("%s refused: %v", ok[:8], err)
		}
	}
	lower := basic("hookuser:old-pass")
	lower.Header.Set("Authorization", "basic "+base64.StdEncoding.EncodeToString([]byte("hookuser:old-pass")))
	if err := s.Verify(lower, t0); err != nil {
		t.Errorf("lower-case scheme refused: %v", err)
	}
	refusals := []struct {
		req    *Request
		reason Reason
	}{
		{basic("hookuser:old-pasS"), reasonMismatch},
		{basic("hookuseR:old-pass"), reasonMismatch},
		{basic("hookuser:"), reasonMismatch},
		{basic("hookuser"), reasonMalformed},
		{func() *Request { r := newReq(); r.Header.Set("Authorization", "Bearer abc"); return r }(), reasonMalformed},
		{func() *Request { r := newReq(); r.Header.Set("Authorization", "Basic %%%"); return r }(), reasonMalformed},
		{newReq(), ReasonMissing},
	}
	for _, c := range refusals {
		err := s.Verify(c.req, t0)
		wantReason(t, err, c.reason)
		noLeak(t, err, []string{"old-pass", "p@ss:with:colons"}, c.req)
	}
	h, _ := s.Sign(newReq(), t0, "")
	if h.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("hookuser:old-pass")) {
		t.Fatalf("Sign = %q", h.Get("Authorization"))
	}
}
