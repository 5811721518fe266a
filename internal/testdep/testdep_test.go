package testdep

import (
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how Missing ended it; like the
// real one, Skip and Fatal end the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = args[0].(string); runtime.Goexit() }
func (r *recorder) Fatal(args ...any) { r.failed = args[0].(string); runtime.Goexit() }

func missing(t *testing.T) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Missing(r, "no %s found", "chromium")
	}()
	<-done
	return r
}

// Any value of CI makes a missing dependency a failure; without CI it is
// a skip. The message starts with Prefix and says what is missing.
func TestMissingFailsUnderAnyCI(t *testing.T) {
	for _, ci := range []string{"", "true", "1", "false"} {
		t.Setenv("CI", ci)
		r := missing(t)
		got, other := r.failed, r.skipped
		if ci == "" {
			got, other = r.skipped, r.failed
		}
		if other != "" || !strings.HasPrefix(got, prefix+"no chromium found") {
			t.Errorf("CI=%q: skipped %q, failed %q", ci, r.skipped, r.failed)
		}
	}
}
