package consoletest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Each kind of page problem the console's browser tests rely on being
// told about is recorded: an uncaught exception, a console error, a
// script the Content-Security-Policy blocks, and a resource answered 404;
// a clean page records nothing.
func TestProblemsAreRecorded(t *testing.T) {
	mux := http.NewServeMux()
	page := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; img-src 'self' data:")
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><html><head><link rel="icon" href="data:,"><title>t</title></head><body><p id="p">page</p>%s</body></html>`, body)
		}
	}
	mux.HandleFunc("GET /clean", page(`<script src="/ok.js"></script>`))
	mux.HandleFunc("GET /ok.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `document.getElementById("p").dataset.ran = "1";`)
	})
	mux.HandleFunc("GET /throws.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `console.error("logged-error"); throw new Error("thrown-error");`)
	})
	mux.HandleFunc("GET /broken", page(`<script src="/throws.js"></script><script>window.inline = 1;</script><img src="/missing.png" alt="">`))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	clean := Start(t, 30*time.Second)
	clean.Step("open a clean page", chromedp.Navigate(srv.URL+"/clean"), chromedp.WaitVisible(chromedp.CSS("#p")))
	clean.Poll("run its script", `document.getElementById("p").dataset.ran == "1"`)
	if p := clean.Problems(); len(p) != 0 {
		t.Errorf("a clean page recorded problems: %q", p)
	}

	b := Start(t, 30*time.Second)
	b.Step("open a broken page", chromedp.Navigate(srv.URL+"/broken"), chromedp.WaitVisible(chromedp.CSS("#p")))
	b.Poll("load the page", `document.readyState == "complete"`)
	got := strings.Join(b.Problems(), "\n")
	for _, want := range []string{"logged-error", "thrown-error", "Content Security Policy", "404 for " + srv.URL + "/missing.png"} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem mentions %q; recorded:\n%s", want, got)
		}
	}
}
