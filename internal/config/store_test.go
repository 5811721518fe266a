package config

import (
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
