package signature

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets for the header parsers of the sender kinds, seeded from the
// npm-library vectors in testdata/<kind>/vectors.json.

// seedHeaders returns every value of the named header in a kind's vectors.
func seedHeaders(f *testing.F, kind, name string) []string {
	f.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", kind, "vectors.json"))
	if err != nil {
		f.Fatal(err)
	}
	var file senderFile
	if err := json.Unmarshal(raw, &file); err != nil {
		f.Fatal(err)
	}
	var out []string
	for _, v := range file.Vectors {
		if name == "url" {
			out = append(out, v.URL)
			continue
		}
		if h, ok := v.Headers[name]; ok {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		f.Fatalf("no %s values in the %s vectors", name, kind)
	}
	return out
}

func FuzzParsePaddleSignature(f *testing.F) {
	for _, s := range seedHeaders(f, "paddle", paddleSignatureHeader) {
		f.Add(s)
	}
	for _, s := range []string{"", "ts=;h1=", "ts=1;ts=2;h1=00", "h1=00", "ts=1", "ts=-1;h1=00", "ts=1;h1=zz", "ts=99999999999999999999;h1=00",
		"ts=1767225600" + strings.Repeat(";h1=00", maxSignatures), "ts=1767225600" + strings.Repeat(";h1=00", maxSignatures+1), ";;;=;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sig, err := parsePaddleSignature(v)
		if err != nil {
			return
		}
		if sig.Timestamp < 0 || !isDigits(sig.TS) || len(sig.H1) == 0 || len(sig.H1) > maxSignatures {
			t.Fatalf("accepted %q as ts=%q (%d) with %d h1", v, sig.TS, sig.Timestamp, len(sig.H1))
		}
		// The signed text is the ts= value as sent, so it must occur in
		// the header verbatim.
		if !strings.Contains(v, "ts="+sig.TS) {
			t.Fatalf("ts %q not taken verbatim from %q", sig.TS, v)
		}
	})
}

func FuzzParseSlackSignature(f *testing.F) {
	for _, s := range seedHeaders(f, "slack", slackSignatureHeader) {
		f.Add(s)
	}
	for _, s := range []string{"", "v0=", "v1=00", "v0=zz", "=00", "v0=00=00", "v0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		b, err := parseSlackSignature(v)
		if err == nil && (len(b) == 0 || !strings.HasPrefix(v, "v0=")) {
			t.Fatalf("accepted %q", v)
		}
	})
}

func FuzzParseSlackTimestamp(f *testing.F) {
	for _, s := range seedHeaders(f, "slack", SlackTimestampHeader) {
		f.Add(s)
	}
	for _, s := range []string{"", "-1", "+1767225600", "1767225600.5", " 1767225600", "999999999999999999999", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ts, err := parseSlackTimestamp(v)
		if err == nil && (ts.Unix() < 0 || !isDigits(v)) {
			t.Fatalf("accepted %q as %v", v, ts)
		}
	})
}

// FuzzTwilioSignedContent checks the URL and form handling: the content
// always starts with the URL, a bodySHA256 URL signs the URL alone, and
// each URL candidate differs from the URL only in its port.
func FuzzTwilioSignedContent(f *testing.F) {
	urls := seedHeaders(f, "twilio", "url")
	raw, _ := os.ReadFile(filepath.Join("testdata", "twilio", "vectors.json"))
	var file senderFile
	_ = json.Unmarshal(raw, &file)
	for i, v := range file.Vectors {
		f.Add(urls[i%len(urls)], v.Body)
	}
	f.Add("https://h.example:443/p?bodySHA256=00&bodySHA256=11", "")
	f.Add("https://[::1]:9/p?bodySHA256=", "{}")
	f.Add("http://h.example/p?a=%zz", "a=%zz&b")
	f.Add("h.example/p", "a=1")
	f.Fuzz(func(t *testing.T, u, body string) {
		content, hash, err := TwilioSignedContent(u, []byte(body))
		if err == nil {
			if !strings.HasPrefix(content, u) {
				t.Fatalf("content %q does not start with the URL %q", content, u)
			}
			if hash != "" && content != u {
				t.Fatalf("bodySHA256 URL %q signs more than the URL", u)
			}
		}
		cands := twilioURLCandidates(u)
		if len(cands) == 0 || len(cands) > 2 || cands[0] != u {
			t.Fatalf("candidates of %q: %q", u, cands)
		}
		for _, c := range cands[1:] {
			if c == u || len(c) == len(u) && c != u {
				t.Fatalf("candidate %q of %q is not a port change", c, u)
			}
		}
	})
}

// FuzzVerifyKinds throws arbitrary values into every header the new schemes
// read: nothing may panic, and nothing signed without the secret may pass.
func FuzzVerifyKinds(f *testing.F) {
	for _, kind := range senderKinds {
		raw, err := os.ReadFile(filepath.Join("testdata", kind, "vectors.json"))
		if err != nil {
			f.Fatal(err)
		}
		var file senderFile
		if err := json.Unmarshal(raw, &file); err != nil {
			f.Fatal(err)
		}
		for _, v := range file.Vectors {
			sig := ""
			for _, n := range []string{gitHubSignatureHeader, shopifyHMACHeader, slackSignatureHeader, twilioSignatureHeader, paddleSignatureHeader, squareSignatureHeader} {
				if s, ok := v.Headers[n]; ok {
					sig = s
				}
			}
			f.Add(sig, v.Headers[SlackTimestampHeader], v.URL, []byte(v.Body))
		}
	}
	schemes := make([]Scheme, 0, len(senderKinds))
	for _, kind := range senderKinds {
		schemes = append(schemes, newSender(f, kind, []string{"fuzz-secret-never-in-vectors"}, 0))
	}
	f.Fuzz(func(t *testing.T, sig, ts, u string, body []byte) {
		h := http.Header{}
		for _, n := range []string{gitHubSignatureHeader, gitHubSHA1SignatureHeader, shopifyHMACHeader, slackSignatureHeader, twilioSignatureHeader, paddleSignatureHeader, squareSignatureHeader, squareSHA1SignatureHeader} {
			h.Set(n, sig)
		}
		h.Set(SlackTimestampHeader, ts)
		h.Set(twilioSignatureSettingsHeader, ts)
		req := &Request{Method: http.MethodPost, URL: u, Header: h, Body: body}
		for i, s := range schemes {
			if err := s.Verify(req, t0); err == nil {
				t.Fatalf("%s accepted sig=%q ts=%q url=%q", senderKinds[i], sig, ts, u)
			}
		}
	})
}
