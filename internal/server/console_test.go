package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
)

// The console is mounted at / on the serve listener, behind admin.token,
// beside the receiver, health and the API, which keep their routes.
func TestConsoleMounted(t *testing.T) {
	h := start(t, sqliteURL(t))
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	resp, err := noRedirect.Get(h.base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("GET /events without a session: %d %s, want a redirect to /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = noRedirect.PostForm(h.base+"/login", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login with admin.token: %d %v", resp.StatusCode, resp.Cookies())
	}
	if code, _ := h.get("/healthz", ""); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, _ := h.get("/api/v1/events", adminToken); code != 200 {
		t.Errorf("/api/v1/events: %d", code)
	}
	if code, _ := h.get("/api/v1/events", ""); code != http.StatusUnauthorized {
		t.Errorf("/api/v1/events without a token: %d, want 401", code)
	}
}

// Without admin.token the console is off, like the API.
func TestConsoleOffWithoutAdminToken(t *testing.T) {
	yaml := strings.Replace(testConfig(sqliteURL(t)), "admin:\n  token: "+adminToken+"\n", "", 1)
	if strings.Contains(yaml, adminToken) {
		t.Fatal("the config still has the token")
	}
	h := startWith(t, yaml)
	for _, path := range []string{"/", "/login", "/events"} {
		if code, _ := h.get(path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s without admin.token: %d, want 404", path, code)
		}
	}
}

// ConsoleLoginLink hands out a full one-time URL: it logs a client in
// once, and a second use is refused.
func TestConsoleLoginLink(t *testing.T) {
	cfg, err := config.Parse("e2e.yaml", []byte(testConfig(sqliteURL(t))), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(cfg, Options{Listener: ln})
	if srv.ConsoleLoginLink() != "" {
		t.Fatal("a login link before the server is ready")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	<-srv.Ready()
	link := srv.ConsoleLoginLink()
	if !strings.HasPrefix(link, "http://"+srv.Addr()+"/login?once=") {
		t.Fatalf("link %q", link)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	resp, err := client.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("following the link: %d at %s, want the overview", resp.StatusCode, resp.Request.URL)
	}
	resp, err = http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("second use of the link: %d, want 401", resp.StatusCode)
	}
}

// The server hands the console its flow engine (the replay page is on),
// its configured names and its metrics: a request refused for its
// signature shows on the sources page.
func TestConsoleAttachedToServer(t *testing.T) {
	h := start(t, sqliteURL(t))
	resp, err := http.Post(h.base+"/hooks/stripe", "application/json", strings.NewReader(`{"id":"evt_x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned stripe request: %d, want 401", resp.StatusCode)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err = c.PostForm(h.base+"/login", url.Values{"token": {adminToken}, "next": {"/destinations"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("destinations page: %d %s", resp.StatusCode, page)
	}
	for _, want := range []string{`<a href="/events?source=github">github</a>`, "<div>401: 1</div>"} {
		if !strings.Contains(page, want) {
			t.Errorf("destinations page lacks %q", want)
		}
	}
	if strings.Contains(page, "no metrics registry is attached") {
		t.Errorf("the server's registry is not attached")
	}
	resp, err = c.Get(h.base + "/replay")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), "flow engine") || !strings.Contains(string(body), `id="replay-plan"`) {
		t.Errorf("replay page on the server: %d, off or without its form", resp.StatusCode)
	}
}
