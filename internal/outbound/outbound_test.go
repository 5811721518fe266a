package outbound

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, p := range []string{
		"",
		"/",
		"/charges",
		"charges/ch_1",
		"/crm/v3/objects/contacts/" + url.PathEscape("ann@example.com"),
		"/orders/" + url.PathEscape("a/b?c#d"),
		"/files/v1.2/..data",
		"/a:b/c@d",
	} {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want ok", p, err)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"/orders/../../admin/secret", "dot segment"},
		{"/orders/..", "dot segment"},
		{"/orders/./x", "dot segment"},
		{"../x", "dot segment"},
		{"/orders/%2e%2e/admin", "dot segment"},
		{"/orders/%2E./admin", "dot segment"},
		{"/orders/" + url.PathEscape("../../admin/secret"), "dot segment"}, // ..%2F..%2Fadmin
		{"/orders/..%5Cadmin", "dot segment"},
		{"/orders/x?admin=1&y=2", "query"},
		{"/orders/x#frag", "fragment"},
		{"//other-host/x", "another host"},
		{"/redirect/http://evil.example/x", "URL"},
		{"http://evil.example/x", "URL"},
		{"@evil.example/x", "credentials"},
		{"evil.example:8080/x", "scheme"},
		{`/orders\..\admin`, "backslash"},
		{"/orders/a\r\nX-Injected: 1", "control character"},
		{"/orders/a\x00", "control character"},
		{"/orders/\xff", "UTF-8"},
	} {
		err := CheckPath(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !IsRequestError(err) {
			t.Errorf("CheckPath(%q) = %v, want a RequestError about %q", tc.path, err, tc.want)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("CheckPath(%q): the error repeats a raw control character: %q", tc.path, err)
		}
	}
}

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		base, path string
		query      url.Values
		want       string
	}{
		{"https://api.example", "/charges", nil, "https://api.example/charges"},
		{"https://api.example/", "charges", nil, "https://api.example/charges"},
		{"https://api.example/v1/", "/charges/", nil, "https://api.example/v1/charges/"},
		{"https://api.example/v1", "/objects/" + url.PathEscape("a/b c"), nil, "https://api.example/v1/objects/a%2Fb%20c"},
		{"https://api.example/v1", "/deals/d1", url.Values{"idProperty": {"stripe_id"}}, "https://api.example/v1/deals/d1?idProperty=stripe_id"},
		{"https://api.example?api_key=k", "/x", url.Values{"q": {"a&b=c", "d"}}, "https://api.example/x?api_key=k&q=a%26b%3Dc&q=d"},
		{"https://user:pw@api.example/v1#frag", "/x", nil, "https://api.example/v1/x"},
	} {
		u, err := URL(tc.base, tc.path, tc.query)
		if err != nil || u.String() != tc.want {
			t.Errorf("URL(%q, %q, %v) = %v, %v; want %s", tc.base, tc.path, tc.query, u, err, tc.want)
		}
	}
	if _, err := URL("https://api.example", "/orders/../../admin", nil); !IsRequestError(err) {
		t.Errorf("a climbing path was joined: %v", err)
	}
	if _, err := URL("https://api.example", "/bad%zz", nil); !IsRequestError(err) {
		t.Errorf("an invalid escape was joined: %v", err)
	}
	if _, err := URL("/relative", "/x", nil); !IsRequestError(err) {
		t.Errorf("a relative base_url was used: %v", err)
	}
}

func TestCheckHeader(t *testing.T) {
	if err := CheckHeader("X-Order", "o1\tpaid"); err != nil {
		t.Errorf("a tab was refused: %v", err)
	}
	for _, tc := range []struct{ name, value string }{
		{"X-Order", "o1\r\nX-Admin: 1"},
		{"X-Order", "o1\n"},
		{"X-Order", "o1\x00"},
		{"X Order", "o1"},
		{"X-Order:", "o1"},
		{"", "o1"},
	} {
		if err := CheckHeader(tc.name, tc.value); !IsRequestError(err) {
			t.Errorf("CheckHeader(%q, %q) = %v, want a RequestError", tc.name, tc.value, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:s3cret@api.example/v1/x?api_key=s3cret#f": "https://api.example/v1/x",
		"http://127.0.0.1:8080/charges":                         "http://127.0.0.1:8080/charges",
		"https://sk_live_s3cret:@api.example":                   "https://api.example",
		"https://u:s3cret@host:badport/x?token=s3cret":          "https://host:badport/x",
		"https://u:ab/s3cret@host/x":                            "https://host/x",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	text := `Post "https://bot:s3cret@api.example/x?api_key=s3cret": dial tcp 127.0.0.1:1: connect: connection refused`
	if got := RedactText(text); strings.Contains(got, "s3cret") || !strings.Contains(got, `"https://api.example/x"`) ||
		!strings.HasSuffix(got, "connection refused") {
		t.Errorf("RedactText = %q", got)
	}
	if RedactError(nil) != nil {
		t.Error("RedactError(nil) is not nil")
	}
}

// A real transport error names the full URL; the redacted one keeps the
// URL without its query and still unwraps to the cause.
func TestRedactErrorOfATransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{context.Background(), nil}, {ctx, context.Canceled}} {
		req, _ := http.NewRequestWithContext(c.ctx, "POST", "http://"+addr+"/charges?api_key=s3cret", nil)
		_, err = http.DefaultClient.Do(req)
		if err == nil || !strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("the transport error does not show the query (%v): the test proves nothing", err)
		}
		red := RedactError(err)
		if strings.Contains(red.Error(), "s3cret") || !strings.Contains(red.Error(), "http://"+addr+"/charges") {
			t.Errorf("redacted: %q", red)
		}
		if c.want != nil && !errors.Is(red, c.want) {
			t.Errorf("redacted error does not unwrap to %v", c.want)
		}
	}
}

// Two listeners: the first redirects to the second, which must never be
// reached, whatever the caller's client says about redirects.
func TestNoRedirects(t *testing.T) {
	var reached atomic.Int32
	second := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
	defer second.Close()
	first := httptest.NewServer(http.RedirectHandler(second.URL+"/stolen", http.StatusFound))
	defer first.Close()
	follows := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
	for _, c := range []*http.Client{nil, http.DefaultClient, follows} {
		resp, err := NoRedirects(c).Get(first.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != second.URL+"/stolen" {
			t.Errorf("answer %d %q, want the 302 itself", resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect target was called %d times", n)
	}
	if follows.CheckRedirect(nil, nil) != nil {
		t.Fatal("the caller's client was changed")
	}
}
