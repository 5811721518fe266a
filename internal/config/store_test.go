package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The store URL is checked by its driver's rules (storeopen), and each
// mistake is named on the store's line, without the URL's password.
func TestStoreURLErrors(t *testing.T) {
	for _, tc := range []struct {
		store, want, not string
	}{
		{"mysql://x", `store: "mysql://x" is not supported: use sqlite:PATH or postgres://user@host:port/db`, ""},
		{"mysql://app:s3cret@db:3306/x", `store: "mysql://app:xxxxx@db:3306/x" is not supported`, "s3cret"},
		{"sqlite:", "store: sqlite: needs a file path, for example sqlite:./data/hookledger.db", ""},
		{"./data/hookledger.db", `store: "./data/hookledger.db" is not supported`, ""},
	} {
		t.Run(tc.store, func(t *testing.T) {
			_, err := Parse("conf.yaml", []byte("listen: 127.0.0.1:1\nstore: \""+tc.store+"\"\n"), env(nil))
			if err == nil {
				t.Fatal("expected an error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "conf.yaml:2:") {
				t.Errorf("error is not on the store's line: %s", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q lacks %q", msg, tc.want)
			}
			if tc.not != "" && strings.Contains(msg, tc.not) {
				t.Errorf("error %q shows the password", msg)
			}
		})
	}
	for _, ok := range []string{"sqlite:./data/h.db", "postgres://u@h:5432/db", "postgresql://u:pw@h/db"} {
		if _, err := Parse("conf.yaml", []byte("store: "+ok+"\n"), env(nil)); err != nil {
			t.Errorf("store %s: %v", ok, err)
		}
	}
}

// A relative sqlite: path in a config file is relative to the file's
// directory, not to the directory the command runs in: a cron job started
// elsewhere reads the same database as the server. The store URL a loaded
// config holds is absolute, so every message names the real file.
func TestRelativeSQLitePathIsRelativeToTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(t.TempDir())
	for _, tc := range []struct{ store, want string }{
		{"sqlite:./data/h.db", "sqlite:" + filepath.Join(dir, "data", "h.db")},
		{"sqlite:h.db", "sqlite:" + filepath.Join(dir, "h.db")},
		{"sqlite:../up/h.db", "sqlite:" + filepath.Join(filepath.Dir(dir), "up", "h.db")},
		{"sqlite:/abs/h.db", "sqlite:/abs/h.db"},
		{"sqlite::memory:", "sqlite::memory:"},
		{"postgres://u@h:5432/db", "postgres://u@h:5432/db"},
	} {
		path := filepath.Join(dir, "hookledger.yaml")
		if err := os.WriteFile(path, []byte("store: \""+tc.store+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for name, load := range map[string]func(string, func(string) (string, bool)) (*Config, error){"Load": Load, "LoadOperator": LoadOperator} {
			c, err := load(path, env(nil))
			if err != nil {
				t.Fatalf("%s %s: %v", name, tc.store, err)
			}
			if c.Store != tc.want {
				t.Errorf("%s: store %s = %q, want %q", name, tc.store, c.Store, tc.want)
			}
		}
	}
	// The default store of a file that names none is relative to the
	// file's directory too; a config file given by a relative name is
	// found from the current directory, as any file argument is.
	if err := os.WriteFile("rel.yaml", []byte("listen: 127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	c, err := Load("rel.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := "sqlite:" + filepath.Join(cwd, "data", "hookledger.db"); c.Store != want {
		t.Errorf("default store = %q, want %q", c.Store, want)
	}
}
