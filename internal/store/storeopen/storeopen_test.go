package storeopen

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Each scheme chooses its driver, and the driver says how many group
// commits the inbox writer runs on it.
func TestForChoosesTheDriverByScheme(t *testing.T) {
	for _, tc := range []struct {
		url, driver string
		flushers    int
	}{
		{"sqlite:./data/h.db", "sqlite", 2},
		{"sqlite:/abs/h.db", "sqlite", 2},
		{"postgres://u@h:5432/db", "postgres", 2},
		{"postgresql://u:pw@h/db?sslmode=disable", "postgres", 2},
	} {
		d, err := For(tc.url)
		if err != nil {
			t.Fatalf("For(%q): %v", tc.url, err)
		}
		if d.Name != tc.driver || d.Flushers != tc.flushers {
			t.Errorf("For(%q) = %s with %d flushers, want %s with %d", tc.url, d.Name, d.Flushers, tc.driver, tc.flushers)
		}
	}
}

// A URL no driver takes is named (its password hidden) with the forms
// that work; a driver's own rule is checked beyond the scheme.
func TestCheckNamesWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"mysql://x", `"mysql://x" is not supported: use sqlite:PATH or postgres://user@host:port/db`},
		{"mysql://app:s3cret@db/x", `"mysql://app:xxxxx@db/x" is not supported: use sqlite:PATH or postgres://user@host:port/db`},
		{"SQLITE:./h.db", `"SQLITE:./h.db" is not supported`},
		{"postgres:/h/db", `"postgres:/h/db" is not supported`},
		{"", `"" is not supported`},
		{"sqlite:", "sqlite: needs a file path, for example sqlite:./data/hookledger.db"},
	} {
		err := Check(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%q) = %v, want %q", tc.url, err, tc.want)
		}
	}
	for _, ok := range []string{"sqlite:h.db", "postgres://u@h/db", "postgresql://h/db"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
}

// Open opens the driver the URL chooses, and refuses what none takes
// without touching anything.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = Open(ctx, "mysql://app:s3cret@db/x")
	if st != nil || err == nil {
		t.Fatalf("Open(mysql) = %v, %v; want an error and no store", st, err)
	}
	if want := `open store: "mysql://app:xxxxx@db/x" is not supported`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Open(mysql) error %q, want it to start with %q", err, want)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://app:s3cret@h:5432/db": "postgres://app:xxxxx@h:5432/db",
		"postgres://app@h/db":             "postgres://app@h/db",
		"postgres://h/db":                 "postgres://h/db",
		"sqlite:./h.db":                   "sqlite:./h.db",
		"postgres://a:b:c@d@h/db":         "postgres://a:xxxxx@h/db",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// OpenReadOnly and OpenExisting never create a database: a file that is
// not there is fs.ErrNotExist, named by its path, and stays absent. A
// store opened read-only refuses writes.
func TestOpenWithoutCreating(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "h.db")
	for name, open := range map[string]func(context.Context, string) (store.Store, error){"OpenReadOnly": OpenReadOnly, "OpenExisting": OpenExisting} {
		_, err := open(ctx, "sqlite:"+path)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no database at "+path) {
			t.Errorf("%s of a missing file: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "sub")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s created the directory: %v", name, err)
		}
	}
	st, err := Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	ro, err := OpenReadOnly(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.ProbeWrite(ctx, time.Now()); err == nil {
		t.Error("a store opened read-only wrote")
	}
}

// Resolve makes a relative sqlite path absolute under the directory given
// and leaves every other URL as it is.
func TestResolve(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"sqlite:./data/h.db", "sqlite:/srv/hl/data/h.db"},
		{"sqlite:h.db", "sqlite:/srv/hl/h.db"},
		{"sqlite:/abs/h.db", "sqlite:/abs/h.db"},
		{"sqlite::memory:", "sqlite::memory:"},
		{"sqlite:", "sqlite:"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"mysql://x", "mysql://x"},
	} {
		if got := Resolve(tc.url, "/srv/hl"); got != tc.want {
			t.Errorf("Resolve(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}
