package consoletest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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

// A browser keeps its temporary files in the test's own directory, which
// the test removes: Chromium leaves a directory (its singleton socket)
// in TMPDIR at every start, and in the system's temporary directory one
// would pile up per browser any test ever started.
func TestBrowserTemporaryFilesStayInTheTestDirectory(t *testing.T) {
	bin := Chromium(t)
	dir := TempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, AllocatorOptions(bin, dir)...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	own, err := filepath.Glob(filepath.Join(dir, "org.chromium.Chromium.*"))
	if err != nil || len(own) == 0 {
		t.Fatalf("the browser's singleton directory is not in its own TMPDIR %s (%v): it went to the system's", dir, err)
	}
}
